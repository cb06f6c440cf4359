"""Attacks that test whether unlearned knowledge is really gone;
:func:`obliviate.evidence.harness.run_task_attacks` runs every one the task has data for (docs/evaluation.md).
None of them modifies the model passed in."""

from __future__ import annotations

from obliviate.attacks.format_shift import format_shift_attack
from obliviate.attacks.probe import fit_choice_probe, linear_probe_attack, value_probe_attack
from obliviate.attacks.relearn import RelearnConfig, curve_auc, relearn_attack, steps_to_reach

__all__ = [
    "RelearnConfig", "curve_auc", "fit_choice_probe", "format_shift_attack", "linear_probe_attack",
    "relearn_attack",
    "steps_to_reach", "value_probe_attack",
]
