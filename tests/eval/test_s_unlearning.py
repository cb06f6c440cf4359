"""S-unlearning reads what must be kept on knowledge no retain term trains on (obliviate.eval.suite.score_against)."""

import json

import pytest

from obliviate.eval import suite
from obliviate.eval.suite import evaluate_task, score_against
from obliviate.tasks import Data, EvalSet, Task
from obliviate.tasks.files import task_from_files
from obliviate.tasks.sources.schema import QAExample


def test_r_reads_the_held_out_kept_knowledge_and_the_trained_r_stays_beside_it():
    """GradDiff's case in issue #41: retain (trained on) kept whole, neighbours gone: S = 1 on the trained retain
    data, 0.5 on held-out knowledge (neighbours 0, held-out wordings of the retain facts 1)."""
    base = {"forget_score": 1.0, "retain_score": 1.0, "untrained_keep_score": 1.0, "neighbour_score": 1.0,
            "heldout_keep_score": 1.0}
    gd = {"forget_score": 0.0, "retain_score": 1.0, "untrained_keep_score": 0.5, "neighbour_score": 0.0,
          "heldout_keep_score": 1.0}
    s = score_against(base, gd)
    assert s["s_unlearning_trained"] == 1.0 and s["r_trained"] == 1.0
    assert s["s_unlearning"] == pytest.approx(0.5) and s["r"] == pytest.approx(0.5)
    assert s["r_source"] == "held-out kept knowledge (held-out retain items, neighbour sets)"
    # no held-out set: the trained R, named so
    s = score_against({"forget_score": 1.0, "retain_score": 1.0}, {"forget_score": 0.0, "retain_score": 0.8})
    assert s["s_unlearning"] == s["s_unlearning_trained"] == pytest.approx(0.8) and "trained on" in s["r_source"]


def test_evaluate_task_pools_neighbours_utility_and_the_retain_variants_into_the_held_out_keep(monkeypatch):
    scores = {"retain_qa": 1.0, "retain_para": 0.0, "near": 0.5, "util": 1.0, "forget_qa": 0.0}
    monkeypatch.setattr(suite, "evaluate_set", lambda model, tok, task, es, **k: {"em": scores[es.name]})
    qa = [QAExample(question="q", answer="a", split="x")]
    task = Task("t", forget=Data(qa=[("q", "a")]), retain=Data(qa=[("r", "b")]), evals=[
        EvalSet("forget_qa", "forget", "qa", qa), EvalSet("retain_qa", "retain", "qa", qa),
        EvalSet("retain_para", "retain", "qa", qa, variant=True), EvalSet("near", "neighbour", "qa", qa),
        EvalSet("util", "utility", "qa", qa)])
    monkeypatch.setattr(suite, "task_metrics", lambda *a, **k: {})
    m = evaluate_task(None, None, task)
    assert m["retain_score"] == 1.0  # the trained retain set alone: variants stay out of the role score
    assert m["untrained_keep_score"] == pytest.approx((0.0 + 0.5 + 1.0) / 3)  # what S-unlearning's R reads
    assert m["heldout_keep_score"] == 0.0  # named for what it reads: the held-out retain items alone
    assert m["neighbour_score"] == 0.5 and m["utility_score"] == 1.0


def test_a_utility_file_is_the_utility_score_never_the_held_out_keep(tmp_path, monkeypatch):
    """Issue #56, item 5: with --utility, nothing of the retain file is held out, and the utility file's score is
    utility_score (and part of untrained_keep_score), never heldout_keep_score."""
    def write(name, recs):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
        return str(tmp_path / name)

    forget = write("f.jsonl", [{"question": f"F{i}?", "answer": "f"} for i in range(4)])
    retain = write("r.jsonl", [{"question": f"R{i}?", "answer": "r"} for i in range(5)])
    medqa = write("medqa.jsonl", [{"question": f"M{i}?", "options": {"A": "a", "B": "b"}, "answer_idx": "B",
                                   "answer": "b"} for i in range(3)])
    task = task_from_files([forget], [retain], utility=[medqa])
    scores = {"forget_qa": 0.0, "retain_qa": 1.0, "utility_medqa": 0.25}
    monkeypatch.setattr(suite, "evaluate_set", lambda model, tok, task, es, **k: {
        ("acc" if es.kind == "mcq" else "em"): scores[es.name]})
    monkeypatch.setattr(suite, "task_metrics", lambda *a, **k: {})
    m = evaluate_task(None, None, task)
    assert "heldout_keep_score" not in m
    assert m["utility_score"] == m["untrained_keep_score"] == 0.25
    before = {**m, "forget_score": 1.0, "untrained_keep_score": 1.0, "untrained_keep_chance": 0.5}
    assert score_against(before, m)["r_source"] == "held-out kept knowledge (utility sets)"


def test_metrics_written_before_untrained_keep_had_its_name_are_read_as_they_were():
    """A base model's metrics from an earlier version (a cached part) held the pooled score as heldout_keep_score."""
    old = {"forget_score": 1.0, "retain_score": 1.0, "heldout_keep_score": 0.8, "heldout_keep_chance": 0.0}
    new = {"forget_score": 0.0, "retain_score": 1.0, "heldout_keep_score": 1.0, "untrained_keep_score": 0.4,
           "untrained_keep_chance": 0.0}
    s = score_against(old, new)
    assert s["r"] == pytest.approx(0.5) and s["r_source"] == "held-out kept knowledge"
