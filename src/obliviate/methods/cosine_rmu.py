"""Cosine RMU (Atil, Gupta, Passonneau 2026, "Model Unlearning Objectives Vary for Distinct
Language Functions"). Reconstruction from the paper's summary (docs/methods.md).

RMU with a direction-only forget loss at decoder layer l:

    L_forget = mean_{b,t} (1 - cos(h_l(x_f)_{bt}, u)),    u = r / ||r||, r ~ U[0,1)^d (once per topic)
    L_retain = alpha * mean_{b,t,j} (h_l(x_r; theta) - h_l(x_r; frozen))^2          (retain="mse", as RMU)
            or alpha * mean_{b,t} (1 - cos(h_l(x_r; theta), h_l(x_r; frozen)))       (retain="cosine")

The paper preset is RMU's, since the reconstruction has no settings of its own.

Details: docs/methods.md, "cosine_rmu" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.errors import ConfigError
from obliviate.losses import at_least_float32, hidden_mse, masked_mean
from obliviate.unlearning.contract import register, weighted_search
from obliviate.methods.rmu import RMU, TINY_PRESET_LAYER_FRAC, WMDP_LAYER_FRAC, check_layer_frac


@dataclass
class CosineRMUConfig:
    layer: int | None = None
    """Decoder layer l whose output is steered; None = from ``layer_frac`` (as RMU)."""
    layer_frac: float = WMDP_LAYER_FRAC
    """With ``layer`` unset: l = the layer nearest to layer_frac * n_layers (7/32: WMDP's layer 7 of 32)."""
    alpha: float = 1200.0
    """Weight of the retain term (RMU's default, for retain="mse"; the cosine retain term is
    bounded in [0, 2], so retain="cosine" wants a much smaller alpha, ~1-10)."""
    retain: Literal["mse", "cosine"] = "mse"
    """Retain term: MSE to the frozen hidden states (as RMU) or mean (1 - cos) to them."""
    n_train_layers: int = 3
    """Train the MLP down-projections of layers l-n+1..l."""
    mask_padding: bool = True
    seed: int = 0
    """Seed of the random control vector u (one per topic: seed + topic), as RMU."""

    def __post_init__(self):
        if self.n_train_layers < 1:
            raise ConfigError(f"config key 'n_train_layers': must be >= 1, got {self.n_train_layers}")
        if self.alpha < 0:
            raise ConfigError(f"config key 'alpha': must be >= 0, got {self.alpha}")
        check_layer_frac(self.layer_frac)
        check_ranges(self, indices=("layer",))


def cosine_distance(h: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """mean over valid (b, t) of 1 - cos(h_bt, target_bt); ``target`` broadcasts against h (B, T, d).

    Zero where h is parallel to the target, 1 where orthogonal, 2 where opposite.
    """
    h = at_least_float32(h)
    target = target.to(h.dtype).expand_as(h)
    dist = 1.0 - F.cosine_similarity(h, target, dim=-1, eps=1e-8)  # (B, T)
    return dist.mean() if mask is None else masked_mean(dist, mask.bool())


@register("cosine_rmu", paper="Atil, Gupta, Passonneau 2026, function-specific "
                              "unlearning objectives (reconstruction)",
          equation="mean (1 − cos(h_l(x_f), u)) + α · (MSE or 1 − cos to the frozen h_l on retain)",
          trains="MLP down-projections of layers l−2..l",
          presets={"tiny": {"lr": 1e-3, "steps": 50,
                            "params": {"alpha": 10.0, "layer_frac": TINY_PRESET_LAYER_FRAC}},
                   "paper": {"lr": 5e-5, "steps": 150,
                             "params": {"alpha": 1200.0, "layer_frac": WMDP_LAYER_FRAC}}},
          search=weighted_search("alpha"))
class CosineRMU(RMU):
    """RMU's plumbing (layer, trainable weights, control vectors) with the cosine objectives."""

    config_cls = CosineRMUConfig
    scaling = ("layer: a fraction of depth (tiny 1/2, paper 7/32); no coefficient (the forget term is a "
               "cosine); retain=\"mse\" grows as ‖h‖² (tune scales α; retain=\"cosine\" is scale-free); lr: "
               "× the fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def forget_term(self, h_f: torch.Tensor, u: torch.Tensor, mask) -> torch.Tensor:
        return cosine_distance(h_f, u, mask)

    def retain_term(self, h_r: torch.Tensor, h_r_ref: torch.Tensor, mask) -> torch.Tensor:
        if self.cfg.retain == "mse":
            return hidden_mse(h_r, h_r_ref, mask)  # RMU's masked MSE
        return cosine_distance(h_r, h_r_ref, mask)
