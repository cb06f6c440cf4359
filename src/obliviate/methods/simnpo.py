"""SimNPO: reference-free, length-normalised NPO (Fan et al. 2024).

    L_forget = -(2/beta) * mean_i log sigmoid(beta * (NLL_bar_i - delta))

with NLL_bar_i the mean answer-token NLL of forget sample i (minimising the
loss pushes it up); total ``gamma * L_forget + alpha * L_retain``. Defaults from
TOFU: beta = 4.5, delta = 0, gamma = 0.125, alpha = 1 (docs/methods.md).

Presets: tiny lr 1e-3, 50 steps (world seed 0, docs/results.md); paper lr 1e-5, 125 steps
(TOFU: 10 epochs of forget10 at batch 32) with the values above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import forget_and_retain, sequence_mean_nll, simnpo_loss


@dataclass
class SimNPOConfig:
    beta: float = 4.5
    delta: float = 0.0
    gamma: float = 0.125
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        # -(2/beta): beta = 0 divides by 0
        check_ranges(self, positive=("beta", "gamma"), nonnegative=("alpha",))


@register("simnpo", paper="Fan et al. 2024, Simplicity Prevails: SimNPO (arXiv:2410.07163)",
          equation="−(2/β) mean log σ(β (NLL̄ − δ)) on forget (NLL̄ "
                   "the length-normalised NLL) + retain NLL / KL",
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 125,
                             "params": {"beta": 4.5, "delta": 0.0, "gamma": 0.125}}},
          search=weighted_search("alpha"))
class SimNPO(Method):
    config_cls = SimNPOConfig
    scaling = ("size class tiny/paper; β, δ, γ, α: scale-free (log-probabilities), not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def loss(self, model, batch, ref) -> dict:
        nll_bar = sequence_mean_nll(model, batch["forget"])  # (B,)
        return forget_and_retain(simnpo_loss(nll_bar, self.cfg.beta, self.cfg.delta), model, batch, ref,
                                 self.cfg)
