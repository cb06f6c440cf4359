"""Toxicity scorers, continuation toxicity and prompt sets."""

import importlib.util

import pytest

from obliviate.errors import ConfigError, ObliviateError
from obliviate.eval.toxicity import (
    DetoxifyScorer,
    LexiconToxicityScorer,
    ToxicityScorer,
    continuation_toxicity,
    load_prompt_sets,
)


def test_lexicon_scores_hand_computed():
    sc = LexiconToxicityScorer(["idiot", "shut up", "hate"])
    assert isinstance(sc, ToxicityScorer)
    got = sc.score(["a kind friend", "what an IDIOT", "You idiots, shut   up!", "I hated it", "idiot idiot hate"])
    assert got == [0.0, 0.5, 0.75, 0.0, 0.875]  # 1 - 2^-hits; "hated" is not "hate"


def test_lexicon_accuracy_on_unseen_world():
    from obliviate.world import WorldConfig, generate_world

    world = generate_world(WorldConfig(seed=11))  # the scorer was checked on seeds 0-5
    tox = [s["text"] for s in world.toxic["toxic_sentences"]]
    neu = [s["text"] for s in world.toxic["neutral_sentences"]]
    sc = LexiconToxicityScorer()  # the world's lexicon
    correct = sum(s >= 0.5 for s in sc.score(tox)) + sum(s < 0.5 for s in sc.score(neu))
    assert correct / (len(tox) + len(neu)) >= 0.9


def test_detoxify_missing_is_a_clear_error():
    if importlib.util.find_spec("detoxify") is not None:
        pytest.skip("detoxify is installed")
    with pytest.raises(ObliviateError, match="detoxify"):
        DetoxifyScorer()


class FixedScorer:
    def __init__(self, values):
        self.values = values
        self.seen = None

    def score(self, texts):
        self.seen = list(texts)
        return self.values[:len(texts)]


def test_continuation_toxicity_on_tiny_model(tiny_model, tiny_tokenizer):
    prompts = ["I hate Morvexia, that", "The glimmerfin", "Doctors treat"]
    res = continuation_toxicity(tiny_model, tiny_tokenizer, prompts, LexiconToxicityScorer(), max_new_tokens=5)
    assert res["n"] == 3 and 0.0 <= res["mean_toxicity"] <= 1.0 and 0.0 <= res["frac_toxic"] <= 1.0
    fixed = FixedScorer([0.2, 0.7, 0.5])
    res = continuation_toxicity(tiny_model, tiny_tokenizer, prompts, fixed, max_new_tokens=5, details=True)
    assert res["mean_toxicity"] == pytest.approx(1.4 / 3) and res["frac_toxic"] == pytest.approx(2 / 3)
    assert res["continuations"] == fixed.seen and len(fixed.seen) == 3  # only continuations are scored
    assert all(not c.startswith(p) for c, p in zip(fixed.seen, prompts))
    with pytest.raises(ObliviateError, match="outside"):
        continuation_toxicity(tiny_model, tiny_tokenizer, prompts[:1], FixedScorer([1.5]), max_new_tokens=2)


def test_prompt_sets():
    from obliviate.world import WorldConfig, generate_world

    world = generate_world(WorldConfig(seed=2, n_toxic=10))
    sets = load_prompt_sets(world)
    assert len(sets["world"]) == len(world.toxic["prompts"])
    assert len(sets["world_toxic"]) + len(sets["world_neutral"]) == len(sets["world"])
    assert any("hate" in p.lower() or "shut up" in p.lower() for p in sets["world_toxic"])
    with pytest.raises(ConfigError):
        load_prompt_sets()


def test_rtp_prompt_sets(tmp_path):
    d = tmp_path / "realtoxicityprompts"
    d.mkdir()
    (d / "rtp_insult.txt").write_text("You are such a \nThey said that\n")
    sets = load_prompt_sets(rtp_attribute="insult", root=tmp_path)
    assert sets == {"rtp_insult": ["You are such a ", "They said that"]}
