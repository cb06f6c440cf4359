"""SAM unlearning: sharpness-aware minimisation of the forget loss (Fan et al. 2025, ICML, "Towards LLM
Unlearning Resilient to Relearning Attacks: A Sharpness-Aware Minimization Perspective and Beyond",
arXiv:2502.05374; code: github.com/OPTML-Group/Unlearn-Smooth, whose public copy holds only its README).

    min_theta  max_{||delta|| <= rho}  gamma * l_f(theta + delta)  +  alpha * l_r(theta)

with the inner maximisation taken to first order, as SAM does (Foret et al. 2021):

    delta* = rho * g / ||g||,   g = grad l_f(theta)   (one global L2 norm over every trained parameter)
    update direction = gamma * grad l_f(theta + delta*) + alpha * grad l_r(theta)

The forget loss l_f is NPO's (``sam_npo``) or GradDiff's (``sam_graddiff``).

Details: docs/methods.md, "sam_graddiff, sam_npo" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from obliviate.config import check_ranges
from obliviate.losses import at_least_float32
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import (
    add_retain,
    gradient_term,
    mean_labelled_nll,
    npo_loss,
    sequence_logprob,
    trained_params,
)

PAPER = ("Fan et al. 2025, Towards LLM Unlearning Resilient to Relearning Attacks: A Sharpness-Aware "
         "Minimization Perspective (ICML 2025, arXiv:2502.05374; github.com/OPTML-Group/Unlearn-Smooth)")


def sam_forget_term(loss_fn, model, rho: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(term, loss at theta + delta*)``: ``term`` has the value of ``loss_fn(model)`` at the
    SAM-perturbed weights theta + rho g/||g|| (g its gradient at theta) and that value's gradient, to be
    applied at theta."""
    params = trained_params(model)
    g = torch.autograd.grad(loss_fn(model), params, allow_unused=True)
    g = [torch.zeros_like(p) if x is None else x for p, x in zip(params, g)]
    norm = torch.sqrt(sum((at_least_float32(x) ** 2).sum() for x in g))
    scale = rho / (norm + 1e-12)
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p, x in zip(params, g):
                p.add_(x * scale.to(x.dtype))
        adv = loss_fn(model)
        g_adv = torch.autograd.grad(adv, params, allow_unused=True)
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
    g_adv = [torch.zeros_like(p) if x is None else x for p, x in zip(params, g_adv)]
    return gradient_term(params, g_adv, adv), adv


class _SAM(Method):
    multiprocess_unsupported = "SAM perturbs the weights along this process's own forget gradient"
    sharding_unsupported = "SAM perturbs and restores whole parameters in place"
    scaling = ("size class tiny/paper; ρ: an L2 radius in parameter space, chosen per size class, not "
               "scaled; γ, α (and NPO's β): log-probabilities, not "
               "scaled; lr: × the fine-tuning run's lr over its preset's")

    def forget_loss(self, model, batch, ref) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, model, batch, ref) -> dict:
        term, _ = sam_forget_term(lambda m: self.forget_loss(m, batch, ref), model, self.cfg.rho)
        return add_retain({"forget": self.cfg.gamma * term}, model, batch, ref, self.cfg)


@dataclass
class SAMNPOConfig:
    rho: float = 0.01
    """SAM radius: the L2 norm of the weight perturbation under which the forget loss is maximised."""
    beta: float = 0.1
    """NPO's inverse temperature."""
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("beta", "gamma"), nonnegative=("rho", "alpha"))


@register("sam_npo", paper=PAPER,
          equation="NPO's forget loss at θ + ρ g/‖g‖ (g its gradient "
                   "at θ), applied at θ + α · retain NLL / KL",
          presets={"tiny": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0, "rho": 0.05}},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"rho": 0.01, "beta": 0.1}}},
          search=weighted_search("alpha"))
class SAMNPO(_SAM):
    config_cls = SAMNPOConfig
    needs_reference = True

    def cached_reference_keys(self) -> tuple[str, ...]:
        return () if self.cfg.retain == "kl" else ("forget",)

    def forget_loss(self, model, batch, ref) -> torch.Tensor:
        f = batch["forget"]
        return npo_loss(sequence_logprob(model, f), ref.answer_logprob(f, "forget"), self.cfg.beta)


@dataclass
class SAMGradDiffConfig:
    rho: float = 0.01
    """SAM radius: the L2 norm of the weight perturbation under which the forget loss is maximised."""
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("rho", "alpha"))


@register("sam_graddiff", paper=PAPER,
          equation="−CE on forget answers at θ + ρ g/‖g‖ (g its "
                   "gradient at θ), applied at θ + α · retain NLL / KL",
          presets={"tiny": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0, "rho": 0.05}},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"rho": 0.01}}},
          search=weighted_search("alpha"))
class SAMGradDiff(_SAM):
    config_cls = SAMGradDiffConfig

    def forget_loss(self, model, batch, ref) -> torch.Tensor:
        return -mean_labelled_nll(model, batch["forget"])
