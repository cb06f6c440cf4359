"""``sae_weak_labels``: weak token labels from a labeller model end to end (SAE, calibration, the rule)."""

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from obliviate.data import encode_documents
from obliviate.filtering import WeakLabelConfig, ground_truth, prf1, sae_weak_labels, train_lm
from obliviate.models.tokenizer import train_tokenizer
from obliviate.tasks.world import WorldConfig, generate_world


@pytest.fixture(scope="module")
def labelled():
    torch.set_num_threads(1)
    world = generate_world(WorldConfig(seed=1, n_forget=4, n_holdout=1, n_retain=4, n_general=4, n_concept=2,
                                       n_toxic=4))
    docs = world.documents()
    tok = train_tokenizer([d["text"] for d in docs], vocab_size=400)
    ds = encode_documents(tok, docs)
    with threadpool_limits(1):
        lm = train_lm(ds, len(tok), n_layer=2, d_model=32, n_head=2, steps=20, batch_size=8, seed=0,
                      pad_id=tok.pad_token_id, bos_id=tok.bos_token_id, eos_id=tok.eos_token_id)
    special = [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id]
    return lm.eval(), ds, ground_truth(ds), special, tok.pad_token_id


def test_weak_labels_read_ground_truth_only_on_the_calibration_slice(labelled):
    lm, ds, truth, special, pad = labelled
    cfg = WeakLabelConfig(latents=64, k=8, steps=40, calibration_fraction=0.25, min_ratio=1.5, min_latents=1)
    with threadpool_limits(1):
        weak, info = sae_weak_labels(lm, ds, truth, 1, cfg, special_ids=special, pad_id=pad)
    assert [len(w) for w in weak] == [len(s) for s in ds.input_ids]
    assert not any(w[np.isin(s, special)].any() for w, s in zip(weak, ds.input_ids))  # specials never flagged
    assert info["sae"]["layer"] == 1 and info["sae"]["n_domain_latents"] == len(info["sae"]["domain_latents"]) > 0
    assert info["weak_labels"] == {k: prf1(weak, truth)[k] for k in ("precision", "recall", "f1")}
    # the truth beyond the calibration slice is never read to make the labels: flipping it changes nothing
    n_cal = round(0.25 * len(ds))
    flipped = truth[:n_cal] + [~t for t in truth[n_cal:]]
    with threadpool_limits(1):
        again, info2 = sae_weak_labels(lm, ds, flipped, 1, cfg, special_ids=special, pad_id=pad)
    assert all((a == b).all() for a, b in zip(weak, again))
    assert info2["sae"]["domain_latents"] == info["sae"]["domain_latents"]
    assert info2["weak_labels"] != info["weak_labels"]  # but they are scored against the truth given
