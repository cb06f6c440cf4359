"""Distance to the gold standard: an oracle model that never saw the forget data, on any task.

- :func:`task_truth_ratios`: TOFU's truth ratio per forget question
  (:func:`obliviate.eval.tofu.model_truth_ratio`), ``R = exp(L(paraphrased answer | q) - mean_j L(perturbed_j
  | q))``, on the task's forget QA items that carry a paraphrased answer and perturbed answers (the world's
  and TOFU's do), in the task's prompt format;
- :func:`oracle_distance`: ``forget_quality``, the KS-test p-value between the model's and the oracle's truth
  ratios (:func:`obliviate.eval.tofu.forget_quality`; 1 = indistinguishable), and the signed and absolute gap
  of the forget score to the oracle's.
"""

from __future__ import annotations

import numpy as np

from obliviate.errors import DataError
from obliviate.eval.tofu import forget_quality, model_truth_ratio
from obliviate.tasks.base import Task


def truth_ratio_items(task: Task) -> list:
    """The forget QA items with a paraphrased answer and perturbed answers (the first such forget set)."""
    for es in task.evals_by_role("forget", variants=False):
        items = [x for x in es.items
                 if es.kind == "qa" and x.get("paraphrased_answer") and x.get("perturbed_answers")]
        if items:
            return items
    return []


def task_truth_ratios(model, tokenizer, task: Task, batch_size: int = 64) -> np.ndarray:
    """Truth ratio of each :func:`truth_ratio_items` item under ``model``: shape (N,). Small R: the model
    prefers the truth."""
    items = truth_ratio_items(task)
    if not items:
        raise DataError(f"task {task.name!r} has no forget QA items with paraphrased and perturbed answers")
    return model_truth_ratio(model, tokenizer, [x["question"] for x in items],
                             [x["paraphrased_answer"] for x in items],
                             [x["perturbed_answers"] for x in items],
                             batch_size=batch_size, prompt_fn=lambda q: task.prompt.prompt(q, tokenizer))


def oracle_gap(score_model: float, score_oracle: float) -> tuple[float, float]:
    """``(model - oracle, |model - oracle|)``: > 0, the model still knows more than the oracle; < 0, it
    over-forgot."""
    gap = float(score_model) - float(score_oracle)
    return gap, abs(gap)


def oracle_distance(model, tokenizer, task: Task, oracle: dict, forget_score: float) -> dict:
    """How far ``model`` is from the oracle on the task's forget data.

    ``oracle``: ``{"truth_ratios": ..., "forget_score": ...}`` of the oracle (:func:`oracle_reference`);
    ``forget_score``: the model's. Returns ``forget_quality`` (None without truth-ratio items),
    ``forget_score_gap`` (signed) and ``abs_forget_score_gap``.
    """
    gap, abs_gap = oracle_gap(forget_score, oracle["forget_score"])
    out = {"forget_score_gap": gap, "abs_forget_score_gap": abs_gap, "forget_quality": None}
    if oracle.get("truth_ratios") is not None:
        out["forget_quality"] = forget_quality(task_truth_ratios(model, tokenizer, task),
                                               oracle["truth_ratios"])
    return out


def oracle_reference(oracle_model, tokenizer, task: Task, forget_score: float) -> dict:
    """What :func:`oracle_distance` compares with: the oracle's truth ratios (None where the task has no items
    for them) and its forget score."""
    tr = task_truth_ratios(oracle_model, tokenizer, task) if truth_ratio_items(task) else None
    return {"truth_ratios": tr, "forget_score": float(forget_score)}
