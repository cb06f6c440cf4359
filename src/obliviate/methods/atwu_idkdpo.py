"""IdkDPO with ATWU's learned token weights (a reconstruction; see :mod:`.atwu`): the loser (the forget
answer) has log pi = sum_t z_t log p(y_t|.) on policy and reference; the winner (a refusal) is unweighted.

Reference: the forget answers' per-token log p_ref(y_t) and the refusals' log pi_ref, computed once before
training, so no frozen copy is held; a KL retain term keeps a live whole copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.unlearning.objectives import add_retain, answer_logprob, dpo_loss, sequence_logprob
from obliviate.unlearning.contract import register, weighted_search
from obliviate.methods._token_weights import PAPER, ScoredMethod, ScorerConfig


@dataclass
class ATWUIdkDPOConfig(ScorerConfig):
    beta: float = 0.1
    """DPO's beta (the SATGA+ beta of the scorer is ``sat_beta``)."""
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"


@register("atwu_idkdpo", paper=PAPER,
          equation="IdkDPO with the forget answer's log π weighted by z",
          search=weighted_search("alpha"))
class ATWUIdkDPO(ScoredMethod):
    """IdkDPO with the loser (forget answer) log pi weighted by z; winner unweighted (a reconstruction)."""

    config_cls = ATWUIdkDPOConfig
    needs_reference = True
    needs_idk = True

    def cached_reference_keys(self) -> tuple[str, ...]:
        return () if self.cfg.retain == "kl" else ("idk",)

    def cached_token_reference_keys(self) -> tuple[str, ...]:
        return () if self.cfg.retain == "kl" else ("forget",)

    def loss(self, model, batch, ref) -> dict:
        f, w = batch["forget"], batch["idk"]
        logits, _, _, z = self.forget_pass(model, f)
        lp_l = answer_logprob(logits, f["labels"], weights=z)
        lp_l_ref = (z * ref.token_logprobs(f, "forget")).sum(-1)
        lp_w = sequence_logprob(model, w)
        lp_w_ref = ref.answer_logprob(w, "idk")
        terms = {"forget": self.cfg.gamma * dpo_loss(lp_w, lp_w_ref, lp_l, lp_l_ref, self.cfg.beta)}
        return add_retain(terms, model, batch, ref, self.cfg)
