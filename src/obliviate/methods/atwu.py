"""ATWU: Alternating Token-Weighted Unlearning (Yuce, Nikolaou, Flammarion 2026, seed 001).

A reconstruction (docs/methods.md): the paper's full text was not available; this is
the most faithful concrete reading of its summary. The scorer, SATGA+ and the
w-step are in :mod:`obliviate.methods._token_weights`.

A linear scorer on the final hidden state weights each forget-answer token,
``z_t = sigmoid(<w, sg(h_t)> + b)``. On one forward pass of the forget batch, the w-step (theta frozen) and
then the theta-step (w frozen, z detached) minimise::

    w:      lam * mean_t l_t + tau * mean_t H_b(z_t) + mu * (mean_t z_t - rho)^2
    theta:  lam * mean_t l_t + alpha * L_retain,      l_t = -z_t * sg(p_t)^(e(z_t)) * CE_t

with e(z) = beta(1 - z) by default. ``atwu_ga``, ``atwu_npo``, ``atwu_simnpo`` and ``atwu_idkdpo`` use the
same scorer and w-step and replace log pi(y|x) by sum_t z_t log p(y_t|.) in their forget loss.

Details: docs/methods.md, "atwu" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.unlearning.contract import register, weighted_search
from obliviate.unlearning.objectives import add_retain
from obliviate.methods._token_weights import PAPER, ScoredMethod, ScorerConfig, satga_plus_loss



@dataclass
class ATWUConfig(ScorerConfig):
    alpha: float = 1.0
    """Weight of the retain term."""
    retain: Literal["nll", "kl"] = "nll"


@register("atwu", paper=PAPER,
          equation=("SATGA+: −z_t sg(p_t)^{β(1−z_t)} CE_t with a learned linear token scorer z (alternating "
                    "θ / w steps) + retain NLL"),
          search=weighted_search("alpha"))
class ATWU(ScoredMethod):
    """ATWU with the SATGA+ forget loss (a reconstruction; see the module docstring)."""

    config_cls = ATWUConfig

    def loss(self, model, batch, ref) -> dict:
        _, nll, mask, z = self.forget_pass(model, batch["forget"])
        terms = {"forget": self.cfg.lam * satga_plus_loss(z, nll, mask, self.cfg.sat_beta, self.cfg.exponent)}
        return add_retain(terms, model, batch, ref, self.cfg)
