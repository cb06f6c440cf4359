"""SimNPO with ATWU's learned token weights (a reconstruction; see :mod:`.atwu`):

    NLL_bar = sum_t z_t CE_t / sum_t z_t per sequence,  L_forget = -(2/beta) mean log sigmoid(beta (NLL_bar - delta))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.unlearning.objectives import add_retain, simnpo_loss
from obliviate.unlearning.contract import register, weighted_search
from obliviate.methods._token_weights import PAPER, ScoredMethod, ScorerConfig


@dataclass
class ATWUSimNPOConfig(ScorerConfig):
    beta: float = 4.5
    """SimNPO's beta (the SATGA+ beta of the scorer is ``sat_beta``)."""
    delta: float = 0.0
    gamma: float = 0.125
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"


@register("atwu_simnpo", paper=PAPER,
          equation="SimNPO with NLL̄ = Σ_t z_t CE_t / Σ_t z_t",
          search=weighted_search("alpha"))
class ATWUSimNPO(ScoredMethod):
    """SimNPO with NLL_bar = sum_t z_t CE_t / sum_t z_t per sequence (a reconstruction)."""

    config_cls = ATWUSimNPOConfig

    def loss(self, model, batch, ref) -> dict:
        _, nll, mask, z = self.forget_pass(model, batch["forget"])
        zm = z * mask
        nll_bar = (zm * nll).sum(-1) / zm.sum(-1).clamp(min=1e-8)
        terms = {"forget": self.cfg.gamma * simnpo_loss(nll_bar, self.cfg.beta, self.cfg.delta)}
        return add_retain(terms, model, batch, ref, self.cfg)
