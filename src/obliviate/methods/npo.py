"""NPO: Negative Preference Optimization (Zhang et al. 2024).

    L_forget = -(2/beta) * mean_i log sigmoid(-beta * (log pi_theta(y_i|x_i) - log pi_ref(y_i|x_i)))

with log pi the sum of answer-token log-probabilities; total
``gamma * L_forget + alpha * L_retain`` (retain NLL or KL). Defaults: beta = 0.1,
gamma = alpha = 1 (docs/methods.md).

log pi_ref depends only on the fixed forget sequences, so it is computed once before training
(:func:`obliviate.unlearning.reference.reference_logprobs`) and no reference copy is held; with
``retain="kl"`` the retain term needs the reference's whole distributions, and a live frozen copy is kept.

Presets: tiny lr 3e-4, 50 steps (world seed 0, docs/results.md); paper lr 1e-5, 125 steps
(TOFU: 10 epochs of forget10 at batch 32), beta = 0.1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import forget_and_retain, npo_loss, sequence_logprob


@dataclass
class NPOConfig:
    beta: float = 0.1
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        # -(2/beta): beta = 0 divides by 0
        check_ranges(self, positive=("beta", "gamma"), nonnegative=("alpha",))


@register("npo", paper="Zhang et al. 2024, Negative Preference Optimization (arXiv:2404.05868)",
          equation="−(2/β) mean log σ(−β (log π − log π_ref)) on forget + α · retain NLL / KL",
          presets={"tiny": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0}},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"beta": 0.1}}},
          search=weighted_search("alpha"))
class NPO(Method):
    config_cls = NPOConfig
    needs_reference = True
    scaling = ("size class tiny/paper; β, γ, α: scale-free (log-probabilities), not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def cached_reference_keys(self) -> tuple[str, ...]:
        """The sub-batches whose reference log-probabilities can be computed once (none with a KL retain
        term)."""
        return () if self.cfg.retain == "kl" else ("forget",)

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        logp = sequence_logprob(model, f)
        logp_ref = ref.answer_logprob(f, "forget")
        return forget_and_retain(npo_loss(logp, logp_ref, self.cfg.beta), model, batch, ref, self.cfg)
