"""ROUGE-L recall equals the rouge-score package's (TOFU's and OpenUnlearning's setting), item by item."""

import json

import pytest

from obliviate.eval.core import rouge_l_recall, rouge_tokens
from obliviate.utils import data_dir


def test_rouge_tokens_by_hand():
    # lower-cased, split at anything but a-z0-9, Porter-stemmed above 3 characters
    assert rouge_tokens("The Writers' names, e.g. Hsiao Yun-Hwa!") == ["the", "writer", "name", "e", "g", "hsiao",
                                                                       "yun", "hwa"]
    assert rouge_tokens("Café 2024") == ["caf", "2024"]  # a non-ASCII letter separates, as in rouge-score
    assert rouge_l_recall("writing books", "He writes books") == pytest.approx(2 / 3)
    assert rouge_l_recall("anything", "") == 0.0


def test_rouge_l_matches_rouge_score_on_tofu_answers():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    path = data_dir() / "tofu" / "forget10_perturbed.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    pairs = [(r["paraphrased_answer"], r["answer"]) for r in rows]  # paraphrased
    pairs += [(p, r["answer"]) for r in rows for p in r["perturbed_answer"]]  # every perturbed answer
    pairs += [(r["answer"], r["answer"]) for r in rows]  # verbatim
    pairs += [(r["answer"], r["paraphrased_answer"]) for r in rows]  # and the other way round
    ours = [rouge_l_recall(p, ref) for p, ref in pairs]
    theirs = [scorer.score(ref, p)["rougeL"].recall for p, ref in pairs]
    assert len(pairs) >= 1600
    assert ours == pytest.approx(theirs, abs=1e-12)
