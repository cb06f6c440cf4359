"""EMBER + an MLP method (ember_then), end to end on a tiny model and the world's concept."""

import pytest
import torch

from obliviate.methods.ember.combine import ember_then, split_combo
from obliviate.unlearning.engine import method_runner
from obliviate.methods.ember.judge import LexiconJudge
from obliviate.errors import ConfigError

FAST_FACTOR = {"K": 32, "factor_kwargs": {"max_iter": 60, "patience": 20}, "min_confidence": 0.1}
"""A random tiny model has no real concept features, so the judge is lenient (>= 10% concept tokens)
to make sure some rows get edited."""


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def concept_setup():
    from obliviate.models.tokenizer import train_tokenizer
    from obliviate.world import WorldConfig, generate_world

    torch.set_num_threads(1)
    world = generate_world(WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=3,
                                       n_toxic=4))
    c = world.concept
    tok = train_tokenizer(c["concept_sentences"] + c["neutral_sentences"], vocab_size=1000)
    return c, tok


def _model(tok):
    from obliviate.models.builders import tiny_llama

    return tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0)


def test_split_combo():
    assert split_combo("rmu+ember") == ("rmu", True)
    assert split_combo("crisp") == ("crisp", False)
    with pytest.raises(ConfigError):
        split_combo("+ember")


def _changed(model, before):
    """Changed parameters; EMBER unties the embeddings, so the new lm_head is compared to the old embedding."""
    old = {**before, "lm_head.weight": before["model.embed_tokens.weight"]}
    return {n for n, p in model.named_parameters() if not torch.equal(p, old[n])}


def _check_ember_rows(model, before, combined):
    assert combined.ember.eligible_token_ids, "EMBER edited nothing"
    emb = model.get_input_embeddings().weight
    rows = [i for i in range(emb.shape[0]) if not torch.equal(emb[i], before["model.embed_tokens.weight"][i])]
    assert rows == sorted(combined.ember.eligible_token_ids)
    assert combined.ember.record.delta == 2.0


def test_snmf_plus_ember(concept_setup):
    c, tok = concept_setup
    model = _model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = {"concept_sentences": c["concept_sentences"], "neutral_sentences": c["neutral_sentences"]}
    # random model: ratios ~1
    run = method_runner(tok, edit_data=data, params={"K": 16, "n_iter": 20, "sparsity": 0.05, "min_ratio": 1.2})
    out = ember_then("snmf+ember", model, tok, c["concept_sentences"], c["neutral_sentences"],
                     LexiconJudge(c["exclusive_terms"], member_fraction=0.1), 2.0, run, **FAST_FACTOR)
    assert out.method_name == "snmf" and out.method["method"] == "snmf"
    _check_ember_rows(out.model, before, out)
    assert out.ember.features, "the lexicon judge kept no feature"
    changed = _changed(out.model, before)
    mlp = {"model.layers.1.mlp.down_proj.weight", "model.layers.1.mlp.up_proj.weight"}
    assert changed - mlp == {"model.embed_tokens.weight"}
    assert out.method["n_features"] >= 1 and changed & mlp == mlp
    recs = out.records()
    assert recs["ember"]["delta"] == 2.0 and "vocab_fraction_edited" in recs["ember"] and "snmf" in recs


def test_rmu_plus_ember_trains_on_top_of_the_edit(concept_setup):
    from obliviate.train import TrainConfig
    from obliviate.unlearning.engine import UnlearnConfig

    c, tok = concept_setup
    model = _model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    forget = [(s[: len(s) // 2], s[len(s) // 2:]) for s in c["concept_sentences"][:4]]
    retain = [(s[: len(s) // 2], s[len(s) // 2:]) for s in c["neutral_sentences"][:4]]
    cfg = UnlearnConfig(method="rmu", batch_size=2, params={"layer": 1},
                        train=TrainConfig(steps=2, lr=1e-2, schedule="constant", progress=False, log_every=1))
    out = ember_then("rmu+ember", model, tok, c["concept_sentences"], c["neutral_sentences"],
                     LexiconJudge(c["exclusive_terms"], member_fraction=0.1), 2.0,
                     method_runner(tok, forget, retain, cfg), **FAST_FACTOR)
    _check_ember_rows(out.model, before, out)
    changed = _changed(out.model, before)
    assert {"model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"} <= changed
    assert out.method["method"] == "rmu" and "method_obj" not in out.method


def test_edit_method_needs_edit_data(concept_setup):
    c, tok = concept_setup
    with pytest.raises(ConfigError, match="edit_data"):
        method_runner(tok)("snmf", _model(tok))


def test_ember_edit_method_and_restore(concept_setup):
    from obliviate.methods import build_method, get_method

    c, tok = concept_setup
    model = _model(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert get_method("ember").kind == "edit"
    method = build_method("ember", {"K": 32, "delta": 2.0, "max_iter": 60, "patience": 20, "min_confidence": 0.1})
    data = {**c, "judge": LexiconJudge(c["exclusive_terms"], member_fraction=0.1)}
    summary = method.edit(model, tok, data)
    assert summary["method"] == "ember" and summary["delta"] == 2.0 and summary["n_edited"] > 0
    assert _changed(model, before) == {"model.embed_tokens.weight"}
    method.restore(model)
    assert model.lm_head.weight is model.get_input_embeddings().weight  # re-tied
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
