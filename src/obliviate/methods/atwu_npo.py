"""NPO with ATWU's learned token weights (a reconstruction; see :mod:`.atwu`): log pi = sum_t z_t log p(y_t|.)
on the policy and, with the same z, on the reference:

    L_forget = -(2/beta) mean log sigmoid(-beta (log pi - log pi_ref))

Reference: the forget answers' per-token log p_ref(y_t), computed once before training (z changes every step,
the token log-probabilities do not), so no frozen copy is held; a KL retain term keeps a live whole copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.unlearning.objectives import add_retain, answer_logprob, npo_loss
from obliviate.unlearning.contract import register, weighted_search
from obliviate.methods._token_weights import PAPER, ScoredMethod, ScorerConfig


@dataclass
class ATWUNPOConfig(ScorerConfig):
    beta: float = 0.1
    """NPO's beta (the SATGA+ beta of the scorer is ``sat_beta``)."""
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"


@register("atwu_npo", paper=PAPER,
          equation="NPO with log π = Σ_t z_t log p_t",
          search=weighted_search("alpha"))
class ATWUNPO(ScoredMethod):
    """NPO with log pi = sum_t z_t log p(y_t|.) on policy and reference (a reconstruction)."""

    config_cls = ATWUNPOConfig
    needs_reference = True

    def cached_token_reference_keys(self) -> tuple[str, ...]:
        return () if self.cfg.retain == "kl" else ("forget",)

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        logits, _, _, z = self.forget_pass(model, f)
        logp = answer_logprob(logits, f["labels"], weights=z)
        logp_ref = (z * ref.token_logprobs(f, "forget")).sum(-1)
        terms = {"forget": self.cfg.gamma * npo_loss(logp, logp_ref, self.cfg.beta)}
        return add_retain(terms, model, batch, ref, self.cfg)
