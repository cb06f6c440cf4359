"""GradAscent (GradDiff with alpha > 0) with ATWU's learned token weights (a reconstruction; :mod:`.atwu`):

    L_forget = -gamma * sum_t z_t CE_t / sum_t z_t
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.losses import masked_mean
from obliviate.unlearning.objectives import add_retain
from obliviate.unlearning.contract import LR_STEPS_SEARCH, register
from obliviate.methods._token_weights import PAPER, ScoredMethod, ScorerConfig


@dataclass
class ATWUGAConfig(ScorerConfig):
    gamma: float = 1.0
    """Weight of the weighted forget term."""
    alpha: float = 0.0
    """Weight of the retain term (0: GradAscent; 1: GradDiff)."""
    retain: Literal["nll", "kl"] = "nll"


@register("atwu_ga", paper=PAPER,
          equation="−Σ_t z_t CE_t / Σ_t z_t with learned token weights z",
          search=LR_STEPS_SEARCH)
class ATWUGradAscent(ScoredMethod):
    """GradAscent with ATWU token weights: -sum_t z_t CE_t / sum_t z_t (a reconstruction)."""

    config_cls = ATWUGAConfig

    def __init__(self, cfg: ATWUGAConfig):
        super().__init__(cfg)
        self.needs_reference = bool(cfg.alpha) and cfg.retain == "kl"

    def loss(self, model, batch, ref) -> dict:
        _, nll, mask, z = self.forget_pass(model, batch["forget"])
        return add_retain({"forget": -self.cfg.gamma * masked_mean(nll, mask, z)}, model, batch, ref,
                          self.cfg)
