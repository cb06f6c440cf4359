"""Format-shift attack: the forget knowledge asked another way.

Unlearning tuned on one format (the canonical forget QA pairs) often leaves the knowledge reachable in
others. A task lists its other formats as *variant* forget evaluation sets (``EvalSet.variant``; the world:
held-out wordings, whole-sentence and lettered MCQs, the cloze of the answer sentence). The attack is the
best of them: ``format_shift_acc`` (the highest variant score) and ``format_shift_set`` (which one).
Each variant's own score keeps its evaluation name (``forget_para_qa_em``, ``forget_mcq_acc``, ...).
"""

from __future__ import annotations

from obliviate.errors import DataError
from obliviate.eval.suite import PRIMARY, evaluate_set
from obliviate.tasks.base import Task


def variant_sets(task: Task) -> list:
    """The task's variant forget sets that have a score (QA or MCQ)."""
    return [es for es in task.evals_by_role("forget") if es.variant and es.kind in PRIMARY]


def format_shift_attack(model, tokenizer, task: Task, metrics: dict | None = None, batch_size: int = 32) -> dict:
    """``{"format_shift_acc", "format_shift_set"}``: the best variant score of ``model`` on ``task``.

    ``metrics``: the model's :func:`~obliviate.eval.suite.evaluate_task` result, whose variant scores are read
    instead of evaluated again (each one missing there is evaluated).
    """
    sets = variant_sets(task)
    if not sets:
        raise DataError(f"task {task.name!r} has no variant forget sets for the format-shift attack")
    scores = {}
    for es in sets:
        key = f"{es.name}_{PRIMARY[es.kind]}"
        if metrics is not None and metrics.get(key) is not None:
            scores[es.name] = metrics[key]
        else:
            scores[es.name] = evaluate_set(model, tokenizer, task, es, batch_size=batch_size)[PRIMARY[es.kind]]
    best = max(scores, key=lambda n: scores[n])
    return {"format_shift_acc": float(scores[best]), "format_shift_set": best}
