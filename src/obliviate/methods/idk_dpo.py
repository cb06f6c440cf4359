"""IdkDPO: DPO towards a refusal (Maini et al. 2024, TOFU).

Winner = a refusal answer ("I don't know"-style) to the forget question, loser =
the forget answer:

    L_forget = -(2/beta) * mean log sigmoid(beta * ((log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))))

(the -(2/beta) scaling matches NPO, which is this loss without a winner).
Total ``gamma * L_forget + alpha * L_retain``; beta = 0.1 (docs/methods.md).

Presets: tiny lr 3e-4, 50 steps (world seed 0, docs/results.md); paper lr 1e-5, 125 steps
(TOFU: 10 epochs of forget10 at batch 32), beta = 0.1.

The batch must carry ``batch["idk"]``: the forget questions with refusal answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import preference_loss


@dataclass
class IdkDPOConfig:
    beta: float = 0.1
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("beta", "gamma"), nonnegative=("alpha",))


@register("idkdpo", paper="Maini et al. 2024, TOFU (arXiv:2401.06121)",
          equation=("DPO with a refusal preferred to the forget answer: −(2/β) mean log σ(β (Δ_refusal − "
                    "Δ_answer)) + retain NLL / KL"),
          presets={"tiny": {"lr": 3e-4, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"beta": 0.1}}},
          search=weighted_search("alpha"))
class IdkDPO(Method):
    config_cls = IdkDPOConfig
    scaling = ("size class tiny/paper; β, γ, α: scale-free (log-probabilities), not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed (tune searches them)")
    needs_reference = True
    needs_idk = True

    def cached_reference_keys(self) -> tuple[str, ...]:
        """Reference log-probabilities of the forget answers and the refusals, computed once before training
        (no reference copy); a KL retain term needs whole distributions, so then the reference stays live."""
        return () if self.cfg.retain == "kl" else ("forget", "idk")

    def loss(self, model, batch, ref) -> dict:
        return preference_loss(model, batch, ref, self.cfg)
