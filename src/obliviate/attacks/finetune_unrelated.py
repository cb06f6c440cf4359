"""Fine-tuning on a few unrelated examples: does a little ordinary training bring the forget set back?

Łucki et al. 2024 ("An Adversarial Perspective on Machine Unlearning for AI Safety") undo RMU by fine-tuning
on 10 examples that have nothing to do with the forget set. Here a copy is fine-tuned on ``n`` (default 10)
examples drawn (seeded) from the task's retain QA pairs (its retain documents where it has no pairs) with the
one training loop, through :func:`~obliviate.attacks.relearn.relearn_attack`, and the forget score is tracked
along the way. docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.relearn import RelearnConfig, attack_grid, relearn_attack
from obliviate.attacks.scoring import forget_items_fn
from obliviate.errors import ConfigError, DataError
from obliviate.tasks.base import Task


def retain_examples(task: Task, tokenizer=None) -> list:
    """The task's retain data as an attacker fine-tunes on it: its QA pairs in the task's prompt format
    (``(prompt, answer)``), else its documents; never a forget item. A one-line :class:`DataError` where it
    has neither."""
    pool = task.prompt.pairs(list(task.retain.qa), tokenizer) if task.retain.qa else list(task.retain.docs)
    if not pool:
        raise DataError(f"task {task.name!r}: no retain data to fine-tune on")
    return pool


def unrelated_examples(task: Task, n: int, tokenizer=None, seed: int = 0) -> list:
    """``n`` retain examples (:func:`retain_examples`), seeded."""
    if n < 1:
        raise ConfigError(f"config key 'n': must be >= 1, got {n}")
    pool = retain_examples(task, tokenizer)
    idx = np.random.default_rng(seed).permutation(len(pool))[:n]
    return [pool[i] for i in sorted(idx)]


def unrelated_finetune_attack(model, tokenizer, task: Task, score_fn, cfg: RelearnConfig | None = None, *,
                              n: int = 10, seed: int = 0, base_acc: float | None = None) -> dict:
    """Fine-tune a copy on :func:`unrelated_examples`; ``unrelated_finetune_acc`` (the forget score
    ``score_fn`` at the end), ``_start_acc``, ``_auc``, ``_curve``, ``_n`` and ``unrelated_finetune_cost``.
    ``model`` is untouched."""
    cfg = cfg or RelearnConfig(steps=20, eval_every=5)
    data = unrelated_examples(task, n, tokenizer, seed)
    cost = Cost()
    with counting(model, cost=cost):  # the copy relearn_attack trains carries the counting hook
        res = relearn_attack(model, tokenizer, data, score_fn, cfg, base_acc=base_acc)
    return {"unrelated_finetune_acc": res["final_acc"], "unrelated_finetune_start_acc": res["initial_acc"],
            "unrelated_finetune_auc": res["auc"], "unrelated_finetune_curve": res["curve"],
            "unrelated_finetune_n": len(data),
            "unrelated_finetune_cost": cost.as_dict()}


@dataclass
class UnrelatedConfig:
    n: int = 10
    """Retain examples fine-tuned on."""
    steps: int = 20

    def __post_init__(self):
        for key in ("n", "steps"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be >= 1, got {getattr(self, key)}")


@register_attack("unrelated_finetune", needs="retain data to fine-tune on (--retain FILE)",
                 applies=lambda task: bool(task.retain), config=UnrelatedConfig,
                 reads=AttackRead("unrelated_finetune_start_acc", "unrelated_finetune_acc",
                                  label="fine-tuning on 10 unrelated (retain) examples"))
def unrelated_finetune_run(r: AttackRun, cfg: UnrelatedConfig) -> dict:
    """Fine-tuning on ``n`` retain examples, one setting: the relearning grid's largest full fine-tuning rate.
    ``unrelated_finetune_items``: the forget items ``r.score_fn`` tracks (at most ``max_eval``:
    :func:`~obliviate.attacks.scoring.forget_items_fn`); ``_variants`` 1 (read at the budget's last step, not
    the best one)."""
    if r.score_fn is None:
        return {}
    rc = max((rc for _, rc in attack_grid(r.model, r.cfg) if not rc.lora), key=lambda rc: rc.lr)
    rc = replace(rc, steps=cfg.steps, eval_every=max(1, cfg.steps // 4), batch_size=min(rc.batch_size, cfg.n))
    return {**unrelated_finetune_attack(r.model, r.tokenizer, r.task, r.score_fn, rc, n=cfg.n,
                                        seed=r.cfg.seed, base_acc=r.base_score),
                                        "unrelated_finetune_lr": rc.lr,
            **read_counts("unrelated_finetune", forget_items_fn(r.tokenizer, r.task, r.cfg.max_eval)[1])}
