"""Universal prefix: the optimised-suffix attack (:mod:`obliviate.attacks.gcg`), placed before the question.

Zou et al. 2023's greedy coordinate gradient, unchanged, with the m optimised tokens right before each forget
question of half A, inside the task's prompt format; scored on half B (``gcg_prefix_acc`` against
``gcg_prefix_start_acc``), GCG's configuration and budget. docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

from obliviate.attacks.attack import AttackRead, AttackRun, register_attack
from obliviate.attacks.gcg import GCGConfig, gcg_attack
from obliviate.tasks.base import Task


def prefix_attack(model, tokenizer, task: Task, cfg: GCGConfig | None = None) -> dict:
    """The optimised universal prefix (module docstring); ``model`` is untouched."""
    return gcg_attack(model, tokenizer, task, cfg, position="prefix", key="gcg_prefix")


@register_attack("gcg_prefix", needs="at least 2 forget QA pairs to split in halves",
                 applies=lambda task: task.forget_halves() is not None, config=GCGConfig,
                 reads=AttackRead("gcg_prefix_start_acc", "gcg_prefix_acc",
                                  label="an optimised prefix, held-out half scored"))
def gcg_prefix_run(r: AttackRun, cfg: GCGConfig) -> dict:
    return prefix_attack(r.model, r.tokenizer, r.task, cfg)
