"""Relearning on the retain set alone (the attack ``relearn_retain``): fine-tune on nothing but the data the
model was meant to keep, and read whether the forget score comes back.

Siddiqui et al. 2025 ("From Dormant to Deleted: Tamper-Resistant Unlearning Through Weight-Space
Regularization", arXiv 2505.22310) find that fine-tuning an unlearned image classifier on its retain set alone,
zero forget examples, brings forget accuracy back from about 50% to nearly 100% for many unlearning methods,
while a model retrained without the forget set stays at 50%: the knowledge was dormant, not deleted. This is
that attack on a language model, a *reconstruction* (the paper's attack is on vision classifiers, and it pins
no language-model data or budget): the training data is the task's retain QA pairs in its prompt format, else
its retain documents (:func:`~obliviate.attacks.finetune_unrelated.retain_examples`); the settings are the
relearning attacker's grid and budget (``attacks.lr_grid``, ``attacks.relearn.steps``; this section may set
its own); the forget items are tracked and the setting and step chosen on a selection part of them, as the
related-corpus attack does (:func:`~obliviate.attacks.relearn.tracked_relearning`). docs/evaluation.md,
"Attacks".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from obliviate.attacks.attack import AttackRead, AttackRun, register_attack
from obliviate.attacks.finetune_unrelated import retain_examples
from obliviate.attacks.relearn import attack_grid, check_grid, tracked_relearning
from obliviate.errors import ConfigError


@dataclass
class RetainRelearnConfig:
    lr_grid: list[float] | None = None
    """Learning rates, where they differ from ``attacks.lr_grid`` (default: that)."""
    steps: int | None = None
    """Fine-tuning budget (optimizer steps), where it differs from ``attacks.relearn.steps`` (default: that)."""

    def __post_init__(self):
        check_grid(self.lr_grid, "lr_grid")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"config key 'steps': must be >= 1, got {self.steps}")


@register_attack("relearn_retain", needs="retain data to fine-tune on (--retain FILE)",
                 applies=lambda task: bool(task.retain), config=RetainRelearnConfig,
                 reads=AttackRead("relearn_retain_start_acc", "relearn_retain_acc", "relearn_retain_base_acc",
                                  label="relearning on the retain set alone"))
def retain_relearn(r: AttackRun, cfg: RetainRelearnConfig) -> dict:
    """Fine-tuning on the retain set alone at each setting of the grid, the forget items tracked
    (:func:`~obliviate.attacks.relearn.tracked_relearning`: ``relearn_retain_acc`` read on B at the setting
    and step chosen on V, ``_curve``, ``_start_acc``, ``_final_acc``, ``_items``, ``_variants``, ...); beside
    them ``relearn_retain_n`` (the retain examples it draws its batches from), ``relearn_retain_data``
    (``qa``: pairs in the task's prompt format, ``docs``: texts) and ``relearn_retain_steps``."""
    data = retain_examples(r.task, r.tokenizer)
    grid = attack_grid(r.model, r.cfg, cfg.lr_grid)
    if cfg.steps is not None:
        grid = [(tag, replace(rc, steps=cfg.steps)) for tag, rc in grid]
    out = tracked_relearning(r, "relearn_retain", data, grid, "retain")
    if not out:
        return {}
    return {**out, "relearn_retain_n": len(data), "relearn_retain_data": "qa" if r.task.retain.qa else "docs",
            "relearn_retain_steps": grid[0][1].steps}
