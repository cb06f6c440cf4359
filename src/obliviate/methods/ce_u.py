"""CE-U: cross-entropy unlearning (Yang 2025).

The target of each forget answer token is the model's own next-token distribution with the answer token
removed: with z_t the logits at the position that predicts y_t,

    q_t = softmax(sg(z_t) with z_t[y_t] = -inf)
    L_forget = mean_t CE(q_t, p_theta_t) = -mean_t sum_{v != y_t} q_t[v] log p_theta(v | y_<t, x)

over the forget answer tokens but the first ``ignore_first_n_answer_tokens`` of each answer. Total
``gamma * L_forget + alpha * L_retain``, alpha = 0 by default.

Details: docs/methods.md, "ce_u" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.losses import (IGNORE_INDEX, at_least_float32, labelled_logits, shift_targets,
                              soft_cross_entropy)
from obliviate.unlearning.contract import LR_STEPS_SEARCH, Method, register
from obliviate.unlearning.objectives import forget_and_retain


def after_first_answer_tokens(labels: torch.Tensor, n: int) -> torch.Tensor:
    """(B, T-1) mask of the labelled targets of each row but its first ``n``."""
    labelled = shift_targets(labels) != IGNORE_INDEX
    return labelled & (labelled.cumsum(-1) > n)


def ceu_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """mean_t CE(softmax(sg(z_t) with z_t[y_t] = -inf), softmax(z_t)) over the N rows: logits (N, V), targets
    (N,)."""
    z = at_least_float32(logits)
    masked = z.detach().clone()
    masked[torch.arange(len(targets), device=targets.device), targets] = float("-inf")
    return soft_cross_entropy(F.softmax(masked, -1), z)  # the target is 0 at the answer token


@dataclass
class CEUConfig:
    ignore_first_n_answer_tokens: int = 1
    """The first answer tokens of each forget answer left out of the loss."""
    gamma: float = 1.0
    alpha: float = 0.0
    """Weight of the retain term (0: none, as open-unlearning's CEU)."""
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("ignore_first_n_answer_tokens", "alpha"))


@register("ce_u", paper=("Yang 2025, CE-U: Cross Entropy Unlearning (arXiv:2503.01224); open-unlearning CEU "
                         "trainer (2231e31) + configs/trainer/CEU.yaml"),
          equation=("mean CE(softmax(sg(z) with z_y = −∞), p_θ) on forget answer tokens after the first n "
                    "(+ α · retain NLL / KL, α = 0 by default)"),
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"ignore_first_n_answer_tokens": 1}}},
          search=LR_STEPS_SEARCH)
class CEU(Method):
    config_cls = CEUConfig

    def __init__(self, cfg: CEUConfig):
        super().__init__(cfg)
        self.needs_reference = cfg.retain == "kl" and cfg.alpha > 0

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        keep = after_first_answer_tokens(f["labels"], self.cfg.ignore_first_n_answer_tokens)
        logits, targets, _ = labelled_logits(model, f, keep)
        return forget_and_retain(ceu_loss(logits, targets), model, batch, ref, self.cfg)
