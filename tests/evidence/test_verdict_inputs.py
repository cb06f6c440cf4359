"""Issue #28's acceptance: on a user task the best-step recovery, seeded option shuffling, length-normalised
cloze scores and membership inference each enter the verdict. Each test runs the real evaluation or selection
code up to the verdict functions (eval.outcome.unlearn_outcome, evidence.verdict.method_verdict) and shows the
verdict that the old reading would have got wrong. (Membership inference's veto of *removed*:
tests/evidence/test_verdict.py::test_membership_inference_can_veto_removed.)"""

import json

import pytest

from obliviate.attacks.relearn import selected_metrics
from obliviate.attacks.scoring import forget_items_fn
from obliviate.eval import core
from obliviate.eval.outcome import unlearn_outcome
from obliviate.eval.suite import evaluate_task
from obliviate.evidence.verdict import method_verdict
from obliviate.tasks import Data, EvalSet, Task
from obliviate.tasks.files import task_from_files

LONG, SHORT = "a very long and winding road", "red"


def _cloze_task() -> Task:
    items = [{"question": f"What did person {i} walk?", "choices": [SHORT, LONG], "answer_index": 1}
             for i in range(6)]
    return Task("user", forget=Data(qa=[("q", "a")]), retain=Data(qa=[("r", "b")]),
                evals=[EvalSet("forget_quiz", "forget", "mcq", items, mcq_style="cloze")])


def _scored(monkeypatch, task, logprobs) -> dict:
    """evaluate_task on ``task`` with each option's summed log-probability given (no model)."""
    monkeypatch.setattr(core, "choice_logprobs", lambda model, tok, ctxs, conts, *a, **k: [logprobs for _ in ctxs])
    return evaluate_task(None, None, task)


def test_the_verdict_reads_cloze_mcqs_length_normalised(monkeypatch):
    # per character: the long true option at -8/28 beats the short wrong one at -2/3, though -8 < -2 raw
    task = _cloze_task()
    base = _scored(monkeypatch, task, [-2.0, -8.0])
    assert (base["forget_quiz_acc"], base["forget_quiz_acc_norm"]) == (0.0, 1.0)
    assert (base["forget_score"], base["forget_score_norm"]) == (0.0, 1.0)
    gone = _scored(monkeypatch, task, [-2.0, -40.0])  # -40/28 < -2/3: lost the fact by either reading
    assert gone["forget_score_norm"] == 0.0
    v = unlearn_outcome(base, gone)
    assert v["outcome"] == "ok" and v["forgot"] == 1.0 and v["length_normalised"]
    # by the raw sum the base model "knew" nothing (0.0, below the 1/2 chance) and the run forgot little
    raw = {k: v for k, v in base.items() if not k.endswith("_norm")}
    assert unlearn_outcome(raw, {k: v for k, v in gone.items() if not k.endswith("_norm")})["outcome"] == \
        "forgot little"
    # a model that still picks the long true option per character has not unlearned, whatever the raw sum says
    kept = _scored(monkeypatch, task, [-2.0, -9.0])
    assert kept["forget_score"] == 0.0 and kept["forget_score_norm"] == 1.0
    assert method_verdict(kept, base, {}, None, [])["verdict"] == "not unlearned"
    assert unlearn_outcome(base, kept)["outcome"] == "forgot little"


def test_shuffled_options_enter_the_verdict(tmp_path, monkeypatch):
    """A user's lettered MCQ built as choices=true_answer+false_answer: the options are shuffled (seeded by the
    question), so a model that only prefers A reads near chance and the run that made it forgot; in the file's
    order it read 1.0 and the run 'forgot little'."""
    rows = [{"q": f"Which town was person {i} born in?", "true_answer": f"Town{i}",
             "false_answer": [f"Town{i + 20}", f"Town{i + 40}"]} for i in range(12)]
    quiz = tmp_path / "quiz.jsonl"
    quiz.write_text("".join(json.dumps(r) + "\n" for r in rows))
    forget = tmp_path / "forget.jsonl"
    forget.write_text("".join(json.dumps({"question": r["q"], "answer": r["true_answer"]}) + "\n" for r in rows))
    spec = {"path": str(quiz), "role": "forget", "kind": "mcq",
            "mapping": "question=q,choices=true_answer+false_answer,answer=true_answer"}
    task = task_from_files([str(forget)], evals=[spec])
    task.evals = [es for es in task.evals if es.kind == "mcq"]
    items = task.evals[0].items
    first = sum(m["answer_index"] == 0 for m in items)
    assert first < len(items)  # shuffled ...
    assert [m["answer_index"] for m in task_from_files([str(forget)], evals=[spec]).evals[-1].items] == \
        [m["answer_index"] for m in items]  # ... seeded

    def letters(ctx_pick):
        monkeypatch.setattr(core, "choice_logprobs", lambda model, tok, ctxs, conts, *a, **k:
                            [[0.0 if i == ctx_pick(c) else -5.0 for i in range(len(cs))] for c, cs in zip(ctxs, conts)])
        return evaluate_task(None, None, task)

    truth = {r["q"]: r["true_answer"] for r in rows}

    def right(ctx):  # the option whose text is the true answer of the question in the prompt
        lines = ctx.splitlines()
        q = next(t for t in truth if t in ctx)
        return next(i for i, l in enumerate(l for l in lines if l[1:3] == ". ") if l[3:] == truth[q])

    base, prefers_a = letters(right), letters(lambda ctx: 0)
    assert base["forget_score"] == 1.0 and prefers_a["forget_score"] == pytest.approx(first / len(items))
    v = unlearn_outcome(base, prefers_a)
    assert v["outcome"] == "ok" and v["forgot"] >= 0.5
    # the file's own order put the answer first: the A-preferring model read 1.0, as the RMU did
    assert unlearn_outcome(base, {**prefers_a, "forget_score": 1.0})["outcome"] == "forgot little"


def test_the_verdict_reads_the_best_step_chosen_on_v_not_the_curves_last_point():
    """Issue #28: RMU's curve went 0.625 -> 1.0 at step 5 and back to 0.5 at step 30, and the row read the last
    point. The attacker's choice (the step best on V) is what the verdict reads: suppressed, not removed."""
    b = [[0, 0.0], [5, 0.9], [30, 0.05]]  # the held-out facts come back at step 5, and fade by step 30
    v = [[0, 0.0], [5, 0.8], [30, 0.1]]  # the selection split sees the same peak
    meth = {"forget_score": 0.0, **selected_metrics("relearn_disjoint", [[("lr", {"tokens_per_step": 1,
                                                                           "tokens_at": [0, 5, 30]}, v, b)]], 1.0)}
    assert meth["relearn_disjoint_acc"] == 0.9 and meth["relearn_disjoint_final_acc"] == 0.05
    meth["relearn_disjoint_start_acc"] = 0.0
    base = {"forget_score": 1.0, "relearn_disjoint_base_acc": 1.0}
    pos = {"positive_control": {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.9}}
    neg = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.05}
    band = {"relearn_disjoint": {"oracle": 0.05, "tolerance": 0.05, "upper": 0.1, "items": 72,
                                 "detectable_share": 0.1}}
    usable = [("relearn_disjoint", "positive_control")]
    assert method_verdict(meth, base, pos, neg, usable, band)["verdict"] == "suppressed"
    last = {**meth, "relearn_disjoint_acc": meth["relearn_disjoint_final_acc"]}
    assert method_verdict(last, base, pos, neg, usable, band)["verdict"] == "removed"


def test_the_relearning_attack_tracks_cloze_mcqs_length_normalised(monkeypatch):
    """The relearning curves' per-item score on a forget set of cloze MCQs only: the length-normalised choice, as
    the verdict reads it (by the raw sum this model 'knows' none of the items; per character it knows all six)."""
    task = _cloze_task()
    monkeypatch.setattr(core, "choice_logprobs", lambda model, tok, ctxs, conts, *a, **k: [[-2.0, -8.0] for _ in ctxs])
    fn, n = forget_items_fn(None, task)
    assert n == 6 and list(fn(None)) == [1.0] * 6
    monkeypatch.setattr(core, "choice_logprobs", lambda model, tok, ctxs, conts, *a, **k: [[-2.0, -40.0] for _ in ctxs])
    assert list(fn(None)) == [0.0] * 6
