"""EMBER's offline lexicon judge (the LLM judge on an endpoint: tests/integrations/test_llm_judge.py)."""

import pytest

from obliviate.methods.ember.judge import (
    Judge,
    LexiconJudge,
    judge_features,
    judge_from_sentences,
    keep,
)
from obliviate.errors import ConfigError, DataError

# --------------------------------------------------------------------------- lexicon judge

TERMS = ["Hogwarts", "quidditch", "Gryffindor", "Albus Dumbledore"]


def test_lexicon_judge_fraction_rule():
    j = LexiconJudge(TERMS)
    assert isinstance(j, Judge)
    # counted: Hog warts Quidd itch Albus the and (7; " ", "," and the fragment "xy" are not counted); members: 5
    v = j.judge(0, ["Hog", "warts", " Quidd", "itch", "\u0120Albus", " the", "and", " ", ",", "xy"])
    assert v.is_member is True and v.confidence == pytest.approx(5 / 7)
    assert not keep(v)
    # ten names and one stray fragment: kept (the fragment says nothing); a short word that is a term counts
    names = ["Hogwarts", "Quidditch", "Gryffindor", "Albus", "Dumbledore"] * 2
    assert keep(j.judge(3, names + ["p"])) and j.judge(3, names + ["p"]).confidence == 1.0
    assert not keep(j.judge(4, names + ["the", "and"]))  # 10/12: real words count against it
    assert LexiconJudge(["al", "hogwarts"]).judge(5, ["al", "the", "xy"]).confidence == pytest.approx(0.5)
    assert j.judge(6, ["Hog", " of", "\u2581a", "xy"]).confidence == pytest.approx(2 / 3)  # short words count
    v = j.judge(1, ["Hog", "warts", "Quidd", "itch", "Albus", "Gryff", "indor", " the"])
    assert v.is_member is True and v.confidence == pytest.approx(7 / 8)
    assert keep(v)
    v = j.judge(2, ["the", "and", " of", "cat", "Hog"])  # 1/5 members -> not a member, confidence 0.8
    assert v.is_member is False and v.confidence == pytest.approx(0.8)
    assert not keep(v)


def test_lexicon_judge_looks_at_top_20_only_and_needs_tokens():
    j = LexiconJudge(TERMS)
    v = j.judge(0, ["cat"] * 20 + ["Hogwarts"] * 5)
    assert v.is_member is False and v.confidence == 1.0
    v = j.judge(0, [" ", "\n", ".."])
    assert v.is_member is None and v.confidence == 0.0 and v.reason.startswith("no judgement")


def test_lexicon_judge_short_pieces_need_exact_match():
    j = LexiconJudge(["al", "hogwarts"])
    assert j.belongs("al")  # a whole term
    assert not j.belongs("ho")  # 2-character piece of "hogwarts"
    assert j.belongs("hog")
    with pytest.raises(ConfigError):
        LexiconJudge([" ", ""])


def test_judge_from_sentences_hand_counts():
    concept = ["Harry went to Hogwarts.", "Hogwarts has a great hall.", "Harry plays quidditch at Hogwarts",
               "quidditch is a game"]
    neutral = ["Harry Styles sings a song.", "The great hall of the city.", "A game of chess", "Prince Harry visited"]
    # words >= 3 chars: 13 concept, 14 neutral. hogwarts: (3/13) / (1/14) = 3.23; quidditch: (2/13) / (1/14) = 2.15;
    # harry: (2/13) / (3/14) = 0.72; every other concept word occurs once (< min_count)
    j = judge_from_sentences(concept, neutral, min_ratio=2.0)
    assert j.terms == {"hogwarts", "quidditch"}
    j = judge_from_sentences(concept, neutral, min_ratio=3.0)
    assert j.terms == {"hogwarts"}
    with pytest.raises(DataError):
        judge_from_sentences(concept, neutral, min_ratio=4.0)


def test_judge_features_keeps_confident_members():
    j = LexiconJudge(TERMS)
    kept, judgements = judge_features(j, {3: ["Hogwarts", "Quidd"], 7: ["cat", "dog"]})
    assert kept == [3] and set(judgements) == {3, 7}
