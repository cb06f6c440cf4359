"""WGA (weighted gradient ascent) and SatImp (token-saturated importance).

    L_forget = -mean_t sg(p_t)^beta * (1 - sg(p_t))^beta2 * CE_t

over forget answer tokens, p_t = p(y_t | y_<t, x). ``beta2 = 0`` is WGA
(beta = 1 by default); ``beta2 > 0`` is SatImp. Total
``gamma * L_forget + alpha * L_retain`` (docs/methods.md).

Presets: tiny lr 1e-3, 50 steps (world seed 0, docs/results.md); paper lr 1e-5, 63 steps
(open-unlearning's TOFU setting: 5 epochs of forget10 at batch 32), beta = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
import torch

from obliviate.losses import masked_mean, token_nll
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import forget_and_retain, forward_logits


def wga_forget_loss(nll: torch.Tensor, mask: torch.Tensor, beta: float, beta2: float = 0.0) -> torch.Tensor:
    """-mean_t sg(p_t)^beta (1 - sg(p_t))^beta2 CE_t over masked tokens."""
    p = torch.exp(-nll.detach())
    w = p.pow(beta)
    if beta2:
        w = w * (1 - p).pow(beta2)
    return -masked_mean(w * nll, mask)


@dataclass
class WGAConfig:
    beta: float = 1.0
    beta2: float = 0.0
    """SatImp's second exponent; 0 gives WGA."""
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("beta", "beta2", "alpha"))


@register("wga", paper="Wang et al., weighted gradient ascent (WGA); SatImp with beta2 > 0",
          equation="−mean sg(p_t)^β (1 − sg(p_t))^β₂ CE_t on forget tokens + retain NLL / KL",
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 63, "params": {"beta": 1.0}}},
          search=weighted_search("alpha"))
class WGA(Method):
    config_cls = WGAConfig
    scaling = ("size class tiny/paper; β, β₂, γ, α: scale-free (log-probabilities), not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        nll, mask = token_nll(forward_logits(model, f), f["labels"])
        return forget_and_retain(wga_forget_loss(nll, mask, self.cfg.beta, self.cfg.beta2), model, batch, ref,
                                 self.cfg)
