"""The filtered model's pretraining: the forget split's tokens stay as inputs and are never a target
(obliviate.train.pretrain, ``mask_splits``)."""

import numpy as np
import pytest

from obliviate.data import encode_documents
from obliviate.errors import ConfigError
from obliviate.train import make_lm_batches
from obliviate.train.pretrain import PretrainConfig, qa_pairs_for, split_label_masks, tokenizer_for, world_for
from obliviate.world import WorldConfig

WORLD = WorldConfig(seed=0, n_forget=4, n_holdout=1, n_retain=4, n_general=2, n_concept=2, n_toxic=4)


def test_the_forget_tokens_are_masked_and_stay_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path))
    cfg = PretrainConfig(world=WORLD, mask_splits=["forget"])
    world = world_for(cfg)
    tok = tokenizer_for(world, 400)
    ds = encode_documents(tok, world.documents(), max_len=64)
    masks = split_label_masks(ds, cfg.mask_splits)
    code = ds.vocab["split"].index("forget")
    for lab, m in zip(ds.labels["split"], masks):
        assert np.array_equal(m == 0, np.asarray(lab) == code)  # exactly the forget tokens
    assert sum(int((m == 0).sum()) for m in masks) > 0
    batch = make_lm_batches(ds, 4, 0, tok.pad_token_id, label_masks=masks)(0)
    # a masked token is still an input, never a label
    ids, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
    assert ((labels == -100) & (ids != tok.pad_token_id)).any()
    assert np.array_equal(labels[labels != -100], ids[labels != -100])


def test_the_filtered_qa_term_leaves_the_forget_facts_out():
    world = world_for(PretrainConfig(world=WORLD))
    full = qa_pairs_for(world)
    kept = qa_pairs_for(world, ["forget"])
    forget = {f["question"] for f in world.facts_by_split("forget")}
    assert len(kept) == len(full) - len(forget)
    assert not any(any(q in p for q in forget) for p, _ in kept)


def test_an_unknown_split_to_mask_is_one_error():
    with pytest.raises(ConfigError, match="mask_splits"):
        PretrainConfig(mask_splits=["forgot"])


def _tiny_pretrain(tmp_path, name, **kw):
    from obliviate.train.pretrain import ModelConfig, TrainConfig, pretrain

    cfg = PretrainConfig(world=WORLD, model=ModelConfig(size="nano", vocab_size=400), batch_size=2, qa_batch_size=8,
                         train=TrainConfig(steps=2, lr=1e-3, log_every=1, progress=False), **kw)
    return pretrain(cfg, tmp_path / name, resume=False, progress=False)


def test_length_groups_give_the_same_loss_and_the_info_says_what_was_masked_and_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "cache"))
    one = _tiny_pretrain(tmp_path, "one", qa_length_groups=1)
    three = _tiny_pretrain(tmp_path, "three", qa_length_groups=3)
    first = [next(r for r in run["summary"]["history"] if "qa" in r)["qa"] for run in (one, three)]
    assert first[0] == pytest.approx(first[1], rel=1e-5)  # the same batch, the same loss, in 1 or 3 forwards
    assert one["info"]["passes"]["forwards"] == 2 * (1 + 1) and three["info"]["passes"]["forwards"] == 2 * (1 + 3)
    assert three["info"]["passes"]["backwards"] == three["info"]["passes"]["forwards"]
    assert three["info"]["passes"]["forward_tokens"] < one["info"]["passes"]["forward_tokens"]  # less padding
    assert one["info"]["masked_tokens"] == 0  # nothing masked: not the QA answers' masks
    assert _tiny_pretrain(tmp_path, "masked", mask_splits=["forget"])["info"]["masked_tokens"] > 0
