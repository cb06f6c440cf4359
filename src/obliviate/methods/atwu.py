"""ATWU: Alternating Token-Weighted Unlearning (Yuce, Nikolaou, Flammarion 2026, seed 001).

A reconstruction (docs/methods.md): the paper's full text was not available; this is
the most faithful concrete reading of its summary. The scorer, SATGA+ and the
w-step are in :mod:`obliviate.methods._token_weights`.

A linear scorer on the final hidden state gives each forget-answer token a weight
``z_t = sigmoid(<w, sg(h_t)> + b)`` (w = 0, b = logit(rho) at start). Each training
step runs, on ONE forward pass of the forget batch:

1. the w-step(s), theta frozen (features, p_t and CE_t detached; the scorer's
   own Adam, lr ``w_lr``)::

       lam * mean_t l_t + tau * mean_t H_b(z_t) + mu * (mean_t z_t - rho)^2

2. the theta-step terms, returned to the training loop with z detached (w frozen)::

       {"forget": lam * mean_t l_t, "retain": alpha * L_retain}

with the SATGA+ token term ``l_t = -z_t * sg(p_t)^(e(z_t)) * CE_t``, e(z) = beta(1 - z)
by default (``exponent``: beta_one_minus_z | beta_z | beta; "beta" with z = 1 is WGA).
Defaults: beta (``sat_beta``) = 5, rho = 0.3, tau = 0.05, mu = 10, lambda (``lam``) =
alpha = 1, one w-step per theta-step, Adam lr 1e-3.

ATWU-weighted objectives (docs/methods.md; one file each: ``atwu_ga.py``, ``atwu_npo.py``,
``atwu_simnpo.py``, ``atwu_idkdpo.py``) use the same scorer and the same w-step, and replace
log pi(y|x) by sum_t z_t log p(y_t|.) in their forget loss:

- ``atwu_ga``: ``-sum_t z_t CE_t / sum_t z_t`` (plus ``alpha`` * retain; alpha = 0 by
  default, i.e. GradAscent; alpha = 1 gives weighted GradDiff);
- ``atwu_npo``: NPO with the weighted log pi, the same weights on the reference;
- ``atwu_simnpo``: SimNPO with NLL_bar = sum_t z_t CE_t / sum_t z_t;
- ``atwu_idkdpo``: IdkDPO with the loser (the forget answer) weighted, on the policy
  and the reference; the winner (the refusal) is unweighted, since the scores
  are defined on forget-answer tokens only.

The w-step of the weighted objectives is the SATGA+ w-step above, not the composed
objective. Reason: with theta frozen, the composed objectives are minimised by putting
weight on tokens that are already improbable (-sum z CE / sum z is lowest when z
sits on the highest-CE tokens; NPO's margin likewise), so the scorer would learn "what
is already forgotten" and chase it. SATGA+'s sg(p)^e(z) factor damps exactly those
tokens, which is the paper's reason for it. The scores are therefore the same
quantity in every ATWU method and comparable by token AUROC.

Presets: :func:`obliviate.methods.register`'s defaults (the summary gives no model
learning rate or step count); the ATWU recipe sets its own on top.

The scorer's (w, b) live on the method object (``method.scorer_state()``), never
among the model's parameters, so the training loop's optimizer cannot touch them.
``method.token_scores(model, batch)`` returns the current scores for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.unlearning.contract import register
from obliviate.unlearning.objectives import add_retain
from obliviate.methods._token_weights import PAPER, ScoredMethod, ScorerConfig, satga_plus_loss



@dataclass
class ATWUConfig(ScorerConfig):
    alpha: float = 1.0
    """Weight of the retain term."""
    retain: Literal["nll", "kl"] = "nll"


@register("atwu", paper=PAPER,
          equation=("SATGA+: −z_t sg(p_t)^{β(1−z_t)} CE_t with a learned linear token scorer z (alternating θ / w "
                    "steps) + retain NLL"))
class ATWU(ScoredMethod):
    """ATWU with the SATGA+ forget loss (a reconstruction; see the module docstring)."""

    config_cls = ATWUConfig

    def loss(self, model, batch, ref) -> dict:
        _, nll, mask, z = self.forget_pass(model, batch["forget"])
        terms = {"forget": self.cfg.lam * satga_plus_loss(z, nll, mask, self.cfg.sat_beta, self.cfg.exponent)}
        return add_retain(terms, model, batch, ref, self.cfg)
