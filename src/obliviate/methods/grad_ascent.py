"""Gradient ascent on the forget set (GradAscent) and its retain-regularised form (GradDiff).

Objective (docs/methods.md): ``gamma * L_forget + alpha * L_retain`` with
``L_forget = -CE(forget answer tokens)`` and ``L_retain`` = NLL on retain data
(``retain="nll"``) or KL(p_ref || p_theta) on retain data (``retain="kl"``).
GradAscent is the case ``alpha = 0``; GradDiff uses ``gamma = alpha = 1``.

Presets: tiny lr 3e-4 (GradAscent 20 steps, GradDiff 50; tuned on world seed 0,
docs/results.md); paper lr 1e-5, 125 steps (TOFU: 10 epochs of forget10 at batch 32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
from obliviate.unlearning.contract import LR_STEPS_SEARCH, Method, register, weighted_search
from obliviate.unlearning.objectives import forget_and_retain, mean_labelled_nll


@dataclass
class GradAscentConfig:
    gamma: float = 1.0
    """Weight of the forget term."""
    alpha: float = 0.0
    """Weight of the retain term: 0, GradAscent's own setting (alpha > 0 is GradDiff)."""
    retain: Literal["nll", "kl"] = "nll"
    """Retain loss where alpha > 0: NLL on retain data, or KL to the frozen reference."""

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("alpha",))  # gamma = 0 forgets nothing


@register("gradascent", paper="baseline (TOFU, Maini et al. 2024)",
          equation="−CE on forget answers",
          presets={"tiny": {"lr": 3e-4, "steps": 20}, "paper": {"lr": 1e-5, "steps": 125}},
          search=LR_STEPS_SEARCH)
class GradAscent(Method):
    config_cls = GradAscentConfig
    scaling = ("size class tiny/paper; γ: scale-free (log-probabilities), not scaled; lr: × the fine-tuning "
               "run's lr over its preset's; steps fixed (tune searches them)")

    def __init__(self, cfg: GradAscentConfig):
        super().__init__(cfg)
        self.needs_reference = cfg.retain == "kl" and cfg.alpha > 0  # no retain term at alpha = 0

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        return forget_and_retain(-mean_labelled_nll(model, f), model, batch, ref, self.cfg)


@dataclass
class GradDiffConfig:
    gamma: float = 1.0
    """Weight of the forget term (-CE on forget tokens)."""
    alpha: float = 1.0
    """Weight of the retain term."""
    retain: Literal["nll", "kl"] = "nll"
    """Retain loss: NLL on retain data, or KL to the frozen reference."""

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("alpha",))


@register("graddiff", paper="baseline (TOFU, Maini et al. 2024)",
          equation="γ · (−CE on forget answers) + α · (NLL or KL to the reference on retain)",
          presets={"tiny": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0}},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"gamma": 1.0, "alpha": 1.0}}},
          search=weighted_search("alpha"))
class GradDiff(Method):
    config_cls = GradDiffConfig
    scaling = ("size class tiny/paper; γ, α: scale-free (log-probabilities), not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        return forget_and_retain(-mean_labelled_nll(model, f), model, batch, ref, self.cfg)
