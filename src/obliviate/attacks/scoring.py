"""What the attacks that rescore a whole task (quantization, direction ablation) score: :func:`scoring_task`."""

from __future__ import annotations

import dataclasses

from obliviate.tasks.base import Task

SCORED = ("forget", "retain")
"""The roles an attack rescores: the forget score it reads, the retain score beside it (what the attack broke)."""


def scoring_task(task: Task) -> Task:
    """``task`` with only its forget and retain evaluation sets, variants aside, and no extra named metrics:
    the sets ``forget_score`` and ``retain_score`` are the means of (:func:`~obliviate.eval.suite.evaluate_task`),
    so both read as on the whole task, at a fraction of its cost (the world: 2 of its 9 sets)."""
    evals = [es for es in task.evals if es.role in SCORED and not es.variant]
    return dataclasses.replace(task, evals=evals, meta={**task.meta, "metrics": []})
