"""PDU: primal-dual constrained unlearning with logit-margin flattening (Entesari et al. 2025).

Forgetting is the objective and keeping the retain set a constraint:

    min_theta L_forget(theta)  subject to  L_retain(theta) <= eps
    L_forget = mean_t (max_v z_t[v] - mean_v z_t[v])^2

over the forget answer tokens (z_t the logits predicting y_t). It is solved on the Lagrangian
``gamma * L_forget + lambda * (L_retain - eps)``: each step descends on theta with the current lambda, then
ascends on the dual variable,

    lambda <- max(0, lambda + dual_step_size * (L_retain - eps)).

Details: docs/methods.md, "pdu" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from obliviate.config import check_ranges
from obliviate.losses import at_least_float32, labelled_logits, ratio_of_sums
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import retain_term


def margin_flattening_loss(logits: torch.Tensor) -> torch.Tensor:
    """mean_t (max_v z_t[v] - mean_v z_t[v])^2 over the N rows of ``logits`` (N, V)."""
    z = at_least_float32(logits)
    gap = z.max(-1).values - z.mean(-1)  # (N,)
    return ratio_of_sums(gap.pow(2).sum(), torch.tensor(float(len(gap)), device=gap.device))


@dataclass
class PDUConfig:
    retain_loss_eps: float | None = None
    """The constraint's bound on the retain loss; None: the retain loss of the first step (before any
    update)."""
    dual_step_size: float = 1.0
    """Step of the dual ascent on lambda (0: a fixed weight, open-unlearning's primal_dual=false)."""
    dual_warmup_epochs: int = 5
    """Passes over the forget set before lambda moves."""
    gamma: float = 1.0
    """Weight of the forget term."""
    alpha: float = 1.0
    """lambda's starting value."""
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("gamma",),
                     nonnegative=("retain_loss_eps", "dual_step_size", "dual_warmup_epochs", "alpha"))


@register("pdu", paper=("Entesari et al. 2025, Constrained Entropic Unlearning: A Primal-Dual Framework for "
                        "LLMs (arXiv:2506.05314); open-unlearning PDU trainer (17e8e73) + "
                        "configs/trainer/PDU.yaml"),
          equation=("γ · mean (max z − mean z)² on forget answer tokens + λ · (retain NLL / KL − ε), "
                    "λ ← max(0, λ + η (L_retain − ε)) each step after the warm-up"),
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 125,
                             "params": {"dual_step_size": 1.0, "dual_warmup_epochs": 5}}},
          search=weighted_search("dual_step_size"))
class PDU(Method):
    config_cls = PDUConfig
    multiprocess_unsupported = ("its dual variable is updated from the retain "
                                "loss of one process's share of the batch")

    def __init__(self, cfg: PDUConfig):
        super().__init__(cfg)
        self.lam = float(cfg.alpha)
        self.eps = cfg.retain_loss_eps
        self.step = 0
        self.warmup_steps = 0

    def on_data(self, sizes: dict) -> None:
        self.warmup_steps = self.cfg.dual_warmup_epochs * sizes["steps_per_epoch"]

    def loss(self, model, batch, ref) -> dict:
        logits, _, _ = labelled_logits(model, batch["forget"])
        retain = retain_term(model, batch["retain"], ref, self.cfg.retain)
        if self.eps is None:
            self.eps = float(retain.detach())
        terms = {"forget": self.cfg.gamma * margin_flattening_loss(logits),
                 "retain": self.lam * (retain - self.eps)}
        if self.step >= self.warmup_steps:  # descend on theta with this lambda, then ascend on lambda
            self.lam = max(0.0, self.lam + self.cfg.dual_step_size * (float(retain.detach()) - self.eps))
        self.step += 1
        return terms

    def scorer_state(self) -> dict:
        return {"lambda": self.lam, "eps": self.eps, "step": self.step}

    def load_scorer_state(self, state: dict) -> None:
        self.lam, self.eps, self.step = float(state["lambda"]), state["eps"], int(state["step"])
