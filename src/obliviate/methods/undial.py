"""UNDIAL: self-distillation on adjusted logits (Dong et al. 2024, NAACL 2025).

The student (the model) is distilled towards the frozen teacher (the reference) whose logit of the
answer token is lowered by ``beta``: for every forget answer token y_t with teacher logits z_ref_t,

    q_t = softmax(z_ref_t - beta * e_{y_t})
    L_forget = mean_t CE(q_t, p_theta_t) = -mean_t sum_v q_t[v] log p_theta(v | y_<t, x)

over the forget answer tokens; total ``gamma * L_forget + alpha * L_retain``.

Details: docs/methods.md, "undial" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.losses import at_least_float32, labelled_logits, soft_cross_entropy
from obliviate.unlearning.contract import LR_STEPS_SEARCH, Method, register
from obliviate.unlearning.objectives import forget_and_retain


def undial_loss(logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor,
                beta: float) -> torch.Tensor:
    """mean_t CE(softmax(z_ref_t - beta e_{y_t}), softmax(z_t)) over the N rows: logits and ref_logits (N, V),
    targets (N,)."""
    adjusted = at_least_float32(ref_logits.detach()).clone()
    adjusted[torch.arange(len(targets), device=targets.device), targets] -= beta
    return soft_cross_entropy(F.softmax(adjusted, -1), logits)


@dataclass
class UNDIALConfig:
    beta: float = 10.0
    """How far the teacher's logit of each forget answer token is lowered."""
    gamma: float = 1.0
    alpha: float = 0.0
    """Weight of the retain term (0: none, as in the paper)."""
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("beta", "alpha"))


@register("undial", paper=("Dong et al. 2024, UNDIAL: Self-Distillation with Adjusted Logits for Robust "
                           "Unlearning in LLMs (arXiv:2402.10052); open-unlearning UNDIAL trainer + "
                           "configs/trainer/UNDIAL.yaml (5a7dfb4)"),
          equation=("mean CE(softmax(z_ref − β·e_y), p_θ) on forget answer tokens (teacher = the frozen "
                    "reference, its logits cached) + α · retain NLL / KL"),
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-4, "steps": 250, "params": {"beta": 10.0, "alpha": 0.0}}},
          search=LR_STEPS_SEARCH)
class UNDIAL(Method):
    config_cls = UNDIALConfig
    needs_reference = True

    def cached_logit_keys(self) -> tuple[str, ...]:
        return ("forget",) if self.cfg.retain == "nll" or not self.cfg.alpha else ()

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        logits, targets, _ = labelled_logits(model, f)
        teacher = ref.labelled_logits(f, "forget")  # (N, V): the same rows
        return forget_and_retain(undial_loss(logits, teacher, targets, self.cfg.beta), model, batch, ref,
                                 self.cfg)
