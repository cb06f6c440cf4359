"""The cached reference (obliviate.unlearning.reference.make_reference): NPO, IdkDPO and the ATWU variants (cached
log-probabilities, per sequence or per token) and the RMU family and probe methods (cached hidden states) hold no
second model, and give the same run as the live frozen copy, resumed or not."""

import copy
import json

import pytest
import torch

from obliviate.unlearning.engine import IDK_ANSWERS, UnlearnConfig, unlearn
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference, make_reference, prepare_reference
from obliviate.methods import build_method
from obliviate.models.layers import num_layers
from obliviate.train import TrainConfig

FORGET = [(f"Question: What is Morvexia-{i} treated with?\nAnswer:", f" It is treated with drug{i}.")
          for i in range(6)]
RETAIN = [(f"Question: Where does fin-{i} live?\nAnswer:", f" It lives in cave{i}.") for i in range(6)]


@pytest.fixture
def tiny_model(tiny_model):
    """The shared tiny Llama in float64. The cache is computed over other batches than the steps' (sorted by length:
    other padding, other kernels), so a cached and a live run differ by rounding; in float32 that rounding, grown over
    the steps of a run, is a CPU's last bits away from 1e-5, in float64 it is below 1e-12."""
    return tiny_model.double()


def _cfg(name, cache, steps=4, params=None, **kw):
    return UnlearnConfig(method=name, params=params or {}, batch_size=3, cache_reference=cache, seed=0,
                         train=TrainConfig(steps=steps, lr=1e-2, schedule="constant", progress=False, log_every=1,
                                           **kw))


def _with_and_without_cache(name, tiny_model, tiny_tokenizer, params=None) -> dict:
    """``{cache_reference: (unlearned model, losses)}`` of method ``name`` on a copy of ``tiny_model``."""
    runs = {}
    for cache in (True, False):
        model, summary = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN,
                                 _cfg(name, cache, params=params))
        runs[cache] = (model, [r["loss"] for r in summary["history"] if "loss" in r])
    return runs


@pytest.mark.parametrize("name", ["npo", "idkdpo", "atwu_npo", "atwu_idkdpo", "undial"])
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


@pytest.mark.parametrize("name", ["atwu_npo", "atwu_idkdpo"])
def test_cached_token_logprobs_read_as_the_whole_copys(name, tiny_model, tiny_tokenizer):
    """The ATWU variants weight the reference's tokens by scores that change every step: the per-token cache, read
    by index on batches of sequences of different lengths, equals the frozen copy's full-logit token NLL."""
    from obliviate.losses import token_nll

    forget = [(q, a + " and more" * (i % 4)) for i, (q, a) in enumerate(FORGET)]
    data = PairedData(tiny_tokenizer, forget, RETAIN, 3, 0, idk=IDK_ANSWERS)
    ref = make_reference(build_method(name), tiny_model, data, lora=False)
    assert ref.model is None and not ref.holds_copy
    assert set(ref.cache) == ({"forget/tokens"} if name == "atwu_npo" else {"forget/tokens", "idk"})
    for step in range(4):
        f = data(step)["forget"]
        nll, _ = token_nll(tiny_model(input_ids=f["input_ids"], attention_mask=f["attention_mask"]).logits,
                           f["labels"])
        assert torch.allclose(ref.token_logprobs(f, "forget"), -nll, atol=1e-5)
    with pytest.raises(Exception, match="cached reference"):
        ref.logits(f)
    # a KL retain term needs whole distributions: the live copy stays
    assert make_reference(build_method(name, {"retain": "kl"}), tiny_model, data, lora=False).holds_copy


@pytest.mark.parametrize("memory", [2**30, 0])
def test_undials_logit_cache_reads_as_the_whole_copys_labelled_logits(memory, tiny_model, tiny_tokenizer):
    """UNDIAL's teacher: the frozen logits at the forget answers' labelled positions, cached for the examples of the
    run's steps (in memory or a file), read row by row as the live copy's full logits at those positions."""
    forget = [(q, a + " and more" * (i % 4)) for i, (q, a) in enumerate(FORGET + FORGET)]
    data = PairedData(tiny_tokenizer, forget, RETAIN, 3, 0)
    ref = make_reference(build_method("undial"), tiny_model, data, lora=False, steps=2, memory_bytes=memory)
    ref.seal()
    assert ref.model is None and not ref.holds_copy and ref.kind.startswith("logits of forget answers")
    assert f"({'memory' if memory else 'disk'}," in ref.kind and (ref.nbytes() > 0) == bool(memory)
    for step in range(2):
        f = data(step)["forget"]
        positions = torch.nn.functional.pad(f["labels"][:, 1:] != -100, (0, 1))
        want = tiny_model(input_ids=f["input_ids"], attention_mask=f["attention_mask"]).logits[positions]
        assert torch.allclose(ref.labelled_logits(f, "forget"), want, atol=1e-5)
    cached = set(ref.logit_cache.rows["forget"])
    assert len(cached) == 6  # two steps of three
    other = next(s for s in range(2, 20) if set(data(s)["forget"]["index"].tolist()) - cached)
    with pytest.raises(Exception, match="were not cached"):
        ref.labelled_logits(data(other)["forget"], "forget")
    # a KL retain term needs whole distributions on the retain set: the live copy stays
    undial = build_method("undial", {"alpha": 1.0, "retain": "kl"})
    assert make_reference(undial, tiny_model, data, lora=False).holds_copy


def test_a_logit_cache_larger_than_the_copy_keeps_the_copy_and_says_why(tiny_model, tiny_tokenizer):
    many = [(f"Question: Tell me all about Morvexia-{i}?\nAnswer:", " It is" + " very" * 60 + " rare.")
            for i in range(60)]
    data = PairedData(tiny_tokenizer, many, RETAIN, 3, 0)
    ref = make_reference(build_method("undial"), tiny_model, data, lora=False)
    assert ref.holds_copy and ref.logit_cache is None
    assert ref.kind.startswith("copy (a logit cache would take") and "GiB, the copy" in ref.kind


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


HIDDEN_METHODS = ["rmu", "adaptive_rmu", "cosine_rmu", "probe_unlearn", "probe_unlearn_single"]
"""The methods whose loss reads only the frozen hidden states of the retain examples at a layer."""


COHERENCE = {"coherence_prompts": ["The glimmerfin lives in", "Ilsa Varnholt was born", "A cave is"],
             "coherence_batch": 2}
"""CRISP with coherence prompts: their last-layer states are computed once in setup, cycled two at a time."""


@pytest.mark.parametrize("name,params", [(n, None) for n in HIDDEN_METHODS] + [("crisp", None), ("crisp", COHERENCE)])
def test_cached_hidden_states_give_the_whole_copys_run(name, params, tiny_model, tiny_tokenizer):
    """The RMU family, the probe methods and CRISP read the frozen states of fixed inputs only: the engine computes
    them once and holds no model (Reference.kind "hidden states ..."), and the run equals the whole copy's."""
    runs = _with_and_without_cache(name, tiny_model, tiny_tokenizer, params=params)
    assert runs[True][1] == pytest.approx(runs[False][1], rel=1e-5, abs=1e-6)
    for (n, a), (_, b) in zip(runs[True][0].named_parameters(), runs[False][0].named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), n


@pytest.mark.parametrize("name", HIDDEN_METHODS)
@pytest.mark.parametrize("memory", [2**30, 0])
def test_the_hidden_cache_holds_no_model_and_reads_as_the_live_reference(name, memory, tiny_model, tiny_tokenizer):
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    method = build_method(name)
    method.trainable(tiny_model)
    (key, layers), = method.cached_hidden_layers().items()
    layer = layers[-1]
    first = data(0)
    ref = prepare_reference(method, tiny_model, data, first, lora=False, steps=1, memory_bytes=memory)
    where = "memory" if memory else "disk"
    assert ref.model is None and not ref.holds_copy and ref.kind.startswith(f"hidden states of retain at layer {layer}")
    assert f"({where}," in ref.kind and (ref.nbytes() > 0) == bool(memory)
    live = Reference(tiny_model, shared=False)
    got, want = ref.hidden(first["retain"], layer, "retain"), live.hidden(first["retain"], layer)
    mask = first["retain"]["attention_mask"].bool()
    assert torch.allclose(got[mask], want[mask], atol=1e-6) and not got[~mask].any()  # padding: zeros, masked out
    # only the examples of the run's steps are computed; a step past them and anything but the cache is refused
    drawn = set(first["retain"]["index"].tolist())
    assert set(ref.hidden_cache.rows["retain"]) == drawn
    other = next(s for s in range(1, 20) if set(data(s)["retain"]["index"].tolist()) - drawn)
    with pytest.raises(Exception, match="were not cached"):
        ref.hidden(data(other)["retain"], layer, "retain")
    with pytest.raises(Exception, match="cached reference has only hidden states"):
        ref.hidden(first["forget"], layer, "forget")
    with pytest.raises(Exception, match="cached reference has only hidden states"):
        ref.logits(first["forget"])


@pytest.mark.parametrize("params", [None, COHERENCE])
def test_crisp_caches_the_retain_states_it_reads_and_its_coherence_prompts(params, tiny_model, tiny_tokenizer):
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    method = build_method("crisp", params)
    method.trainable(tiny_model)
    method.fit(tiny_model, tiny_tokenizer)
    ref = prepare_reference(method, tiny_model, data, data(0), lora=False, steps=2)
    last = num_layers(tiny_model) - 1
    want = method.layers + ([] if params else [last])  # without coherence prompts L_coh reads the retain examples
    assert ref.model is None and ref.hidden_cache.layers == {"retain": tuple(want)} and method.saes is not None
    if params:  # every prompt's frozen last-layer states, as a live reference reads them
        c = method.coherence
        live = Reference(tiny_model, shared=False).hidden(c, last)
        m = c["attention_mask"].bool()
        assert method.coherence_ref.shape == live.shape and torch.allclose(method.coherence_ref[m], live[m], atol=1e-6)
    else:
        assert method.coherence_ref is None
    assert set(method.loss(tiny_model, data(1), ref)) == {"unlearn", "reg", "coh"}


def test_unmasked_padding_keeps_a_frozen_prefix(tiny_model, tiny_tokenizer):
    """With mask_padding off RMU's retain term reads padded positions too, which depend on the batch: no cache."""
    runs = _with_and_without_cache("rmu", tiny_model, tiny_tokenizer, params={"mask_padding": False})
    assert runs[True][1] == pytest.approx(runs[False][1], rel=1e-6, abs=1e-7)
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    method = build_method("rmu", {"mask_padding": False})
    method.trainable(tiny_model)
    assert make_reference(method, tiny_model, data, lora=False).kind.startswith("prefix 0..")


@pytest.mark.parametrize("name", HIDDEN_METHODS)
def test_the_prefix_reference_holds_the_layers_up_to_the_methods_depth(name, tiny_model, tiny_tokenizer):
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    method = build_method(name, {"mask_padding": False})  # masked padding: cached hidden states, no prefix
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


def test_unlearn_counts_the_passes_of_its_steps(tiny_model, tiny_tokenizer):
    """GradDiff: a forget and a retain forward per step, each backpropagated; NPO's cached reference adds none in the
    steps, only its one forward before step 0 (the 6 forget answers' log-probabilities, one batch of up to 16), which
    is the method's cost too; with a KL retain term the live frozen copy adds two forwards per step (forget
    log-probabilities and retain distributions), none of them backpropagated."""
    runs = {}
    for name, params in (("graddiff", {}), ("npo", {}), ("npo", {"retain": "kl"})):
        _, summary = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, _cfg(name, True, steps=3,
                                                                                                params=params))
        runs[name + str(params)] = summary["passes"]
    assert runs["graddiff{}"]["forwards"] == runs["graddiff{}"]["backwards"] == 6
    assert runs["npo{}"]["forwards"] == 6 + 1 and runs["npo{}"]["backwards"] == 6
    kl = runs["npo{'retain': 'kl'}"]
    assert kl["backwards"] == 6 and kl["forwards"] == 12
    assert kl["forward_tokens"] > runs["npo{}"]["forward_tokens"]
