"""Attacks that test whether unlearned knowledge is really gone.

- :mod:`.relearn`: fine-tune a copy on related data and track how fast forget accuracy returns;
- :mod:`.probe`: a linear probe on hidden states picks the correct MCQ choice;
- :mod:`.format_shift`: the same facts asked as MCQ, QA, paraphrased QA and cloze.

None of them modifies the model passed in. :func:`obliviate.attacks.suite.run_task_attacks` runs
them on any task; :func:`obliviate.tasks.world.run_attacks` runs all three on a world's forget
split and returns flat metrics with stable names.
"""

from __future__ import annotations

from obliviate.attacks.format_shift import FORMATS, cloze_prompt, format_shift_attack
from obliviate.attacks.probe import fit_choice_probe, linear_probe_attack
from obliviate.attacks.relearn import RelearnConfig, curve_auc, relearn_attack, steps_to_reach
from obliviate.eval.answers import answer_matches, forget_qa_eval  # scoring, kept importable from here


__all__ = [
    "FORMATS", "RelearnConfig", "answer_matches", "cloze_prompt", "curve_auc", "fit_choice_probe",
    "forget_qa_eval", "format_shift_attack", "linear_probe_attack", "relearn_attack", "steps_to_reach",
]
