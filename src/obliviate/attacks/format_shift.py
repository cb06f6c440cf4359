"""Format-shift attack: the forget knowledge asked another way.

Unlearning tuned on one format (the canonical forget QA pairs) often leaves the knowledge reachable in others.
A task lists its other formats as *variant* forget evaluation sets (``EvalSet.variant``; the world: held-out
wordings, whole-sentence and lettered MCQs, the cloze of the answer sentence). The attack is the best of them:
``format_shift_acc`` (the highest variant score above chance) and ``format_shift_set`` (which one), with
``format_shift_items`` (that set's items) and ``format_shift_variants`` (the sets it is the best of). Each
variant's own score keeps its evaluation name (``forget_para_qa_em``, ``forget_mcq_acc``, ...).
"""

from __future__ import annotations

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.errors import DataError
from obliviate.eval.suite import PRIMARY, evaluate_set
from obliviate.tasks.base import Task


def variant_sets(task: Task) -> list:
    """The task's variant forget sets that have a score (QA or MCQ)."""
    return [es for es in task.evals_by_role("forget") if es.variant and es.kind in PRIMARY]


def above_chance(score: float, chance: float | None) -> float:
    """``clip((score - chance) / (1 - chance), 0, 1)``: a score's share of the way from chance to perfect."""
    c = chance or 0.0
    return float(min(1.0, max(0.0, (score - c) / (1.0 - c)))) if c < 1 else 0.0


def format_shift_attack(model, tokenizer, task: Task, metrics: dict | None = None,
                        batch_size: int = 32) -> dict:
    """``{"format_shift_acc", "format_shift_set"}``: the best variant of ``model`` on ``task``, each variant's
    score taken above its chance (:func:`above_chance`: a lettered MCQ at chance reads 0, not 0.25, so sets of
    different chance compare); ``format_shift_items``, the best set's items (the mean it is), and
    ``format_shift_variants``, the sets it is the maximum of (:func:`~obliviate.attacks.attack.read_counts`).

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
            scores[es.name] = evaluate_set(model, tokenizer, task, es,
                                           batch_size=batch_size)[PRIMARY[es.kind]]
    above = {es.name: above_chance(scores[es.name], es.chance) for es in sets}
    best = max(above, key=lambda n: above[n])
    size = {es.name: len(es.items) for es in sets}
    return {"format_shift_acc": above[best], "format_shift_set": best,
            **read_counts("format_shift", size[best], len(above))}


@register_attack("format_shift", needs="variants of the forget set (the same facts asked another way, as the "
                                       "world's other wordings or RWKU's level "
                                       "3 are; a task of QA files has none)",
                 applies=lambda task: bool(variant_sets(task)),
                 reads=AttackRead("forget_score", "format_shift_acc", chance="forget_chance",
                                  label="the best variant of the forget set, above its chance"))
def format_attack(r: AttackRun, cfg: None) -> dict:
    """The best score over the forget set's variants (read from the model's evaluation where given)."""
    return format_shift_attack(r.model, r.tokenizer, r.task, r.metrics)
