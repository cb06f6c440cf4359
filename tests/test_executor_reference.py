"""The cached reference (obliviate.methods.engine.make_reference): NPO and IdkDPO hold no second model, and give
the same run as the live frozen copy, resumed or not."""

import copy
import json

import pytest
import torch

from obliviate.methods.engine import IDK_ANSWERS, PairedData, Reference, UnlearnConfig, make_reference, unlearn
from obliviate.methods import build_method
from obliviate.models.layers import num_layers
from obliviate.train import TrainConfig

FORGET = [(f"Question: What is Morvexia-{i} treated with?\nAnswer:", f" It is treated with drug{i}.")
          for i in range(6)]
RETAIN = [(f"Question: Where does fin-{i} live?\nAnswer:", f" It lives in cave{i}.") for i in range(6)]


def _cfg(name, cache, steps=4, **kw):
    return UnlearnConfig(method=name, batch_size=3, cache_reference=cache, seed=0,
                         train=TrainConfig(steps=steps, lr=1e-2, schedule="constant", progress=False, log_every=1,
                                           **kw))


def _with_and_without_cache(name, tiny_model, tiny_tokenizer) -> dict:
    """``{cache_reference: (unlearned model, losses)}`` of method ``name`` on a copy of ``tiny_model``."""
    runs = {}
    for cache in (True, False):
        model, summary = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, _cfg(name, cache))
        runs[cache] = (model, [r["loss"] for r in summary["history"] if "loss" in r])
    return runs


@pytest.mark.parametrize("name", ["npo", "idkdpo"])
def test_cached_and_live_reference_give_the_same_run(name, tiny_model, tiny_tokenizer):
    runs = _with_and_without_cache(name, tiny_model, tiny_tokenizer)
    assert runs[True][1] == pytest.approx(runs[False][1], rel=1e-4, abs=1e-5)
    for (n, a), (_, b) in zip(runs[True][0].named_parameters(), runs[False][0].named_parameters()):
        assert torch.allclose(a, b, atol=1e-5), n


def test_cached_reference_holds_no_model_and_reads_by_index(tiny_model, tiny_tokenizer):
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0, idk=IDK_ANSWERS)
    ref = make_reference(build_method("idkdpo"), tiny_model, data, lora=False)
    assert ref.model is None and set(ref.cache) == {"forget", "idk"} and len(ref.cache["forget"]) == len(FORGET)
    live = Reference(tiny_model, shared=False)
    batch = data(1)
    for key in ("forget", "idk"):
        assert torch.allclose(ref.answer_logprob(batch[key], key), live.answer_logprob(batch[key], key), atol=1e-5)
    with pytest.raises(Exception, match="cached reference"):
        ref.logits(batch["forget"])
    # a KL retain term needs whole distributions: the live copy stays
    kl = make_reference(build_method("npo", {"retain": "kl"}), tiny_model, data, lora=False)
    assert kl.model is not None and kl.cache is None


class Killed(Exception):
    pass


def test_resume_with_a_cached_reference_is_exact(tiny_model, tiny_tokenizer, tmp_path):
    full, _ = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, _cfg("npo", True, steps=4),
                      tmp_path / "full")
    cfg = _cfg("npo", True, steps=4, checkpoint_every=2)

    def die(model, step):
        raise Killed()

    with pytest.raises(Killed):  # interrupted after the checkpoint of step 2
        unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, cfg, tmp_path / "resumed",
                eval_fn=lambda m, step: die(m, step) if step == 3 else {}, eval_every=3)
    state = torch.load(next((tmp_path / "resumed" / "checkpoints").iterdir()) / "state.pt", weights_only=True)
    assert set(state["extra"]["reference"]) == {"forget"}  # the cache is in the checkpoint
    resumed, _ = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, cfg, tmp_path / "resumed")
    a = [json.loads(x)["loss"] for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x)["loss"] for x in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
         if "loss" in json.loads(x)]
    assert a == pytest.approx(b, rel=1e-6)
    for (n, p), (_, q) in zip(full.named_parameters(), resumed.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), n


PREFIX_METHODS = ["rmu", "adaptive_rmu", "cosine_rmu", "probe_unlearn", "probe_unlearn_single"]


@pytest.mark.parametrize("name", PREFIX_METHODS)
def test_a_frozen_prefix_gives_the_whole_copys_run(name, tiny_model, tiny_tokenizer):
    """The RMU family and the probe methods read only the frozen hidden states up to a layer: the engine keeps a copy
    of the layers up to it alone (Reference.kind "prefix ..."), and the run equals the whole copy's."""
    runs = _with_and_without_cache(name, tiny_model, tiny_tokenizer)
    assert runs[True][1] == pytest.approx(runs[False][1], rel=1e-6, abs=1e-7)
    for (n, a), (_, b) in zip(runs[True][0].named_parameters(), runs[False][0].named_parameters()):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("name", PREFIX_METHODS)
def test_the_prefix_reference_holds_the_layers_up_to_the_methods_depth(name, tiny_model, tiny_tokenizer):
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    method = build_method(name)
    method.trainable(tiny_model)  # resolves the layer(s), as the engine does before the reference
    depth = method.reference_depth()
    ref = make_reference(method, tiny_model, data, lora=False)
    n = num_layers(tiny_model)
    assert ref.kind == f"prefix 0..{depth} of {n} layers"
    whole, kept = sum(p.numel() for p in tiny_model.parameters()), sum(p.numel() for p in ref.model.parameters())
    assert kept < whole if depth < n - 1 else kept <= whole  # the probe methods' default layers reach the last one
    batch = data(0)
    live = Reference(tiny_model, shared=False)
    assert live.kind == "copy"
    assert torch.equal(ref.hidden(batch["retain"], depth), live.hidden(batch["retain"], depth))
    with pytest.raises(Exception, match=f"layers 0..{depth} only"):
        ref.logits(batch["forget"])
    with pytest.raises(Exception, match=f"layers 0..{depth} only"):
        ref.hidden(batch["retain"], depth + 1)
    assert make_reference(method, tiny_model, data, lora=False, cache=False).kind == "copy"
