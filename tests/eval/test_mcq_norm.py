"""Cloze MCQs: the raw sum of log-probabilities favours short choices, so lm-eval's length-normalised accuracy
(``acc_norm``: log-likelihood / len(choice) in characters) is reported beside it (issue #28, item 10)."""

import pytest

from obliviate.eval import core
from obliviate.eval.suite import evaluate_task
from obliviate.tasks import Data, EvalSet, Task


def test_acc_norm_divides_by_the_choice_length(monkeypatch):
    # hand-computed: raw -2 > -6 picks the short choice; per character -2/2 = -1 < -6/8 = -0.75 picks the long one
    monkeypatch.setattr(core, "choice_logprobs", lambda *a, **k: [[-2.0, -6.0], [-3.0, -1.0]])
    mcqs = [{"question": "q1", "choices": ["ab", "abcdefgh"], "answer_index": 1},
            {"question": "q2", "choices": ["abc", "abcd"], "answer_index": 1}]  # -1 vs -0.25: both pick 1
    r = core.mcq_accuracy(None, None, mcqs, style="cloze")
    assert r["predictions"] == [0, 1] and r["accuracy"] == 0.5
    assert r["predictions_norm"] == [1, 1] and r["accuracy_norm"] == 1.0
    assert "accuracy_norm" not in core.mcq_accuracy(None, None, mcqs, style="letters")  # one letter each: same


def test_cloze_sets_report_acc_norm(tiny_model, tiny_tokenizer):
    items = [{"question": f"The colour {i} is", "choices": ["red", "a very long and winding colour"],
              "answer_index": 1} for i in range(4)]
    task = Task("t", forget=Data(qa=[("q", "a")]), retain=Data(qa=[("q", "a")]),
                evals=[EvalSet("c", "forget", "mcq", items, mcq_style="cloze"),
                       EvalSet("l", "retain", "mcq", items)])
    m = evaluate_task(tiny_model, tiny_tokenizer, task)
    assert 0.0 <= m["c_acc_norm"] <= 1.0 and "l_acc_norm" not in m
    assert m["c_acc"] == pytest.approx(0.0)  # a random-init model prefers the 1-word choice by the raw sum
