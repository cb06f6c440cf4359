"""SatImp: gradient ascent with saturation and importance token weights (Yang et al. 2025).

    w_t = sg(p_t)^beta1 * (1 - sg(p_t))^beta2
    L_forget = -mean_t w_t * CE_t = mean_t w_t * log p_t

over the forget answer tokens, p_t = p(y_t | y_<t, x): the saturation weight p^beta1 favours tokens the model
still predicts well (as WGA's p^beta), the importance weight (1 - p)^beta2 those not yet certain. Total
``gamma * L_forget + alpha * L_retain`` (retain NLL or KL). beta2 = 0 is WGA (obliviate's ``wga``, which
also takes a ``beta2``; this is the method under its own name and defaults).

Defaults from open-unlearning's ``configs/trainer/SatImp.yaml`` (423c6f2): beta1 = 5, beta2 = 1,
gamma = 0.1, alpha = 1, retain NLL, lr 1e-5 for 5 epochs; its trainer ``src/trainer/unlearn/satimp.py``
(file version 0ad76a2; ``compute_satimp_loss`` in src/trainer/utils.py 19a6141) computes this loss.

Presets: tiny lr 1e-3, 50 steps (the default, not tuned); paper lr 1e-5, 63 steps (5 epochs of forget10's 400
pairs at batch 32, as obliviate's wga) with the values above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from obliviate.config import check_ranges
from obliviate.losses import ratio_of_sums
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import forget_and_retain, labelled_logprobs


def satimp_loss(logp: torch.Tensor, beta1: float, beta2: float) -> torch.Tensor:
    """mean_t sg(p_t)^beta1 (1 - sg(p_t))^beta2 log p_t over the N answer tokens' log-probabilities (N,)."""
    p = logp.detach().exp()
    w = p.pow(beta1) * (1 - p).pow(beta2)
    return ratio_of_sums((w * logp).sum(), torch.tensor(float(len(logp)), device=logp.device))


@dataclass
class SatImpConfig:
    beta1: float = 5.0
    """Exponent of the saturation weight p."""
    beta2: float = 1.0
    """Exponent of the importance weight 1 - p."""
    gamma: float = 0.1
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("beta1", "beta2", "alpha"))


@register("satimp", paper=("Yang et al. 2025, Exploring Criteria of Loss Reweighting to Enhance LLM "
                           "Unlearning (SatImp, arXiv:2505.11953); open-unlearning SatImp trainer + "
                           "configs/trainer/SatImp.yaml (423c6f2)"),
          equation="−mean sg(p_t)^β₁ (1 − sg(p_t))^β₂ CE_t on forget answer tokens + α · retain NLL / KL",
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 63,
                             "params": {"beta1": 5.0, "beta2": 1.0, "gamma": 0.1, "alpha": 1.0}}},
          search=weighted_search("alpha"))
class SatImp(Method):
    config_cls = SatImpConfig

    def __init__(self, cfg: SatImpConfig):
        super().__init__(cfg)
        self.needs_reference = cfg.retain == "kl" and cfg.alpha > 0

    def loss(self, model, batch, ref) -> dict:
        logp, _ = labelled_logprobs(model, batch["forget"])
        return forget_and_retain(satimp_loss(logp, self.cfg.beta1, self.cfg.beta2), model, batch, ref,
                                 self.cfg)
