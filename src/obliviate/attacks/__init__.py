"""Attacks that test whether unlearned knowledge is really gone.

- :mod:`.relearn`: fine-tune a copy on related data and track how fast forget accuracy returns;
- :mod:`.probe`: a linear probe on hidden states picks the correct MCQ choice;
- :mod:`.format_shift`: the same facts asked as MCQ, QA, paraphrased QA and cloze.

None of them modifies the model passed in. :func:`run_attacks` runs all three on a world's
forget split and returns flat metrics with stable names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.attacks.format_shift import FORMATS, cloze_prompt, format_shift_attack
from obliviate.attacks.probe import fit_choice_probe, linear_probe_attack
from obliviate.attacks.relearn import (
    RelearnConfig,
    answer_matches,
    curve_auc,
    forget_qa_eval,
    relearn_attack,
    steps_to_reach,
    world_relearn_sets,
)
from obliviate.errors import ConfigError


@dataclass
class AttackSuiteConfig:
    relearn: RelearnConfig = field(default_factory=RelearnConfig)
    relearn_facts: bool = False
    """Also run the relearning attack in mode "facts" (train on half the forget QA pairs, test on the rest)."""
    probe_layers: list[int] | None = None
    """Decoder layers to probe (default: all)."""
    probe_train_frac: float = 0.5
    probe_C: float = 1.0
    seed: int = 0
    """Seeds the probe split and the "facts" relearning split (the fine-tuning itself uses ``relearn.seed``)."""

    def __post_init__(self):
        if not 0 < self.probe_train_frac < 1:
            raise ConfigError(f"config key 'probe_train_frac': must be in (0, 1), got {self.probe_train_frac}")
        if self.probe_C <= 0:
            raise ConfigError(f"config key 'probe_C': must be > 0, got {self.probe_C}")


def _relearn_metrics(prefix: str, res: dict) -> dict:
    return {f"{prefix}_forget_qa_acc": res["final_acc"], f"{prefix}_initial_acc": res["initial_acc"],
            f"{prefix}_auc": res["auc"], f"{prefix}_steps_to_base": res["steps_to_base"],
            f"{prefix}_tokens_to_base": res["tokens_to_base"], f"{prefix}_base_acc": res["base_acc"],
            f"{prefix}_curve": res["curve"]}


def run_attacks(model, tokenizer, world, base_acc: float | None = None, cfg: AttackSuiteConfig | None = None,
                *, base_model=None, out_dir=None, resume: bool = True) -> dict:
    """All attacks on ``world``'s forget split; a flat dict of metrics.

    ``base_acc``: the forget QA accuracy before unlearning (the target of ``steps_to_base``;
    ideally measured with :func:`forget_qa_eval`, whose default prefix match is >= exact match);
    ``base_model``, if given, is evaluated instead, on each relearning mode's own eval facts.
    Without either, the ``*_steps_to_base`` / ``*_tokens_to_base`` metrics are None. In mode
    "facts" a scalar ``base_acc`` (measured on all forget facts) stands in for the base accuracy
    on the evaluated half.

    Keys: ``relearn_forget_qa_acc`` (after relearning), ``relearn_initial_acc``, ``relearn_auc``,
    ``relearn_steps_to_base``, ``relearn_tokens_to_base``, ``relearn_base_acc``, ``relearn_curve``
    (``[[step, acc], ...]``), the same with prefix ``relearn_facts`` if ``cfg.relearn_facts``,
    ``probe_acc``, ``probe_best_layer``, ``probe_per_layer``, ``format_<f>`` for f in
    :data:`FORMATS`, and ``attack_seconds``.

    With ``out_dir``, each relearning attack keeps its log and (``cfg.relearn.checkpoint_every``)
    checkpoints in ``out_dir/<mode>``, and a rerun resumes it (see :func:`relearn_attack`).
    """
    cfg = cfg or AttackSuiteConfig()
    if cfg.probe_layers:  # a bad layer fails now, not after the relearning attacks
        from obliviate.models.layers import check_layer

        for layer in cfg.probe_layers:
            check_layer(model, layer)
    t0 = time.time()
    forget = world.facts_by_split("forget")
    from obliviate.eval.world import full_answer_mcqs

    mcqs = full_answer_mcqs(world, world.mcqs(split="forget"))  # options as whole answer sentences
    out: dict = {}
    modes = ["paragraphs"] + (["facts"] if cfg.relearn_facts else [])
    for mode in modes:
        train_data, eval_facts = world_relearn_sets(world, mode, seed=cfg.seed)
        eval_fn = forget_qa_eval(tokenizer, eval_facts)
        target = eval_fn(base_model) if base_model is not None else base_acc
        res = relearn_attack(model, tokenizer, train_data, eval_fn, cfg.relearn, base_acc=target,
                             out_dir=None if out_dir is None else Path(out_dir) / mode, resume=resume)
        out.update(_relearn_metrics("relearn" if mode == "paragraphs" else "relearn_facts", res))
    probe = linear_probe_attack(model, tokenizer, mcqs, layers=cfg.probe_layers, train_frac=cfg.probe_train_frac,
                                seed=cfg.seed, C=cfg.probe_C)
    out["probe_acc"] = probe["best_acc"]
    out["probe_best_layer"] = probe["best_layer"]
    out["probe_per_layer"] = {str(l): a for l, a in probe["per_layer"].items()}
    for name, acc in format_shift_attack(model, tokenizer, forget, mcqs).items():
        out[f"format_{name}"] = acc
    out["attack_seconds"] = time.time() - t0
    return out


__all__ = [
    "AttackSuiteConfig", "FORMATS", "RelearnConfig", "answer_matches", "cloze_prompt", "curve_auc", "fit_choice_probe",
    "forget_qa_eval", "format_shift_attack", "linear_probe_attack", "relearn_attack", "run_attacks",
    "steps_to_reach", "world_relearn_sets",
]
