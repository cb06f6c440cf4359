"""Fine-tuning on a few unrelated examples: does a little ordinary training bring the forget set back?

Łucki et al. 2024 ("An Adversarial Perspective on Machine Unlearning for AI Safety") undo RMU by fine-tuning
on 10 examples that have nothing to do with the forget set. Here a copy is fine-tuned on ``n`` (default 10)
examples drawn (seeded) from the task's retain QA pairs (its retain documents where it has no pairs) with the
one training loop, through :func:`~obliviate.attacks.relearn.relearn_attack`, and the forget score is tracked
along the way. docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

import numpy as np

from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.relearn import RelearnConfig, relearn_attack
from obliviate.errors import ConfigError, DataError
from obliviate.tasks.base import Task


def unrelated_examples(task: Task, n: int, tokenizer=None, seed: int = 0) -> list:
    """``n`` retain examples, seeded: (prompt, answer) pairs in the task's format, else retain documents."""
    if n < 1:
        raise ConfigError(f"config key 'unrelated_n': must be >= 1, got {n}")
    pool = task.prompt.pairs(list(task.retain.qa), tokenizer) if task.retain.qa else list(task.retain.docs)
    if not pool:
        raise DataError(f"task {task.name!r}: no retain data to fine-tune on")
    idx = np.random.default_rng(seed).permutation(len(pool))[:n]
    return [pool[i] for i in sorted(idx)]


def unrelated_finetune_attack(model, tokenizer, task: Task, score_fn, cfg: RelearnConfig | None = None, *,
                              n: int = 10, seed: int = 0, base_acc: float | None = None) -> dict:
    """Fine-tune a copy on :func:`unrelated_examples`; ``unrelated_ft_acc`` (the forget score ``score_fn`` at
    the end), ``_start_acc``, ``_auc``, ``_curve``, ``_n`` and ``unrelated_ft_cost``. ``model`` is untouched."""
    cfg = cfg or RelearnConfig(steps=20, eval_every=5)
    data = unrelated_examples(task, n, tokenizer, seed)
    cost = Cost()
    with counting(model, cost=cost):  # the copy relearn_attack trains carries the counting hook
        res = relearn_attack(model, tokenizer, data, score_fn, cfg, base_acc=base_acc)
    return {"unrelated_ft_acc": res["final_acc"], "unrelated_ft_start_acc": res["initial_acc"],
            "unrelated_ft_auc": res["auc"], "unrelated_ft_curve": res["curve"], "unrelated_ft_n": len(data),
            "unrelated_ft_cost": cost.as_dict()}
