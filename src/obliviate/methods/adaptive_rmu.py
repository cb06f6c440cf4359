"""Adaptive RMU (Dang et al. 2025): RMU (:mod:`.rmu`) with the steering coefficient set from the model itself,

    c = beta * mean_{b,t} ||h_l(x_f)||,

measured with the frozen model on the first forget batch, before any update; beta = 5.
Presets as RMU's without c (tiny: alpha = 10).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from obliviate.losses import masked_mean
from obliviate.methods import register
from obliviate.config import check_ranges
from obliviate.methods.rmu import RMU, TINY_PRESET_LAYER_FRAC, WMDP_LAYER_FRAC, RMUConfig


@dataclass
class AdaptiveRMUConfig(RMUConfig):
    beta: float = 5.0
    """c = beta * mean ||h_l(x_f)|| on the first forget batch (frozen model)."""

    def __post_init__(self):
        super().__post_init__()
        check_ranges(self, positive=("beta",))


def mean_token_norm(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    norms = h.float().norm(dim=-1)  # (B, T)
    return norms.mean() if mask is None else masked_mean(norms, mask.bool())


@register("adaptive_rmu", paper="Dang et al. 2025, Adaptive RMU",
          equation="RMU with c = β · mean ‖h_l^ref(x_f)‖ (frozen model, first batch)",
          trains="MLP down-projections of layers l−2..l",
          presets={"tiny": {"lr": 1e-3, "steps": 50, "params": {"alpha": 10.0, "layer_frac": TINY_PRESET_LAYER_FRAC}},
                   "paper": {"lr": 5e-5, "steps": 150,
                             "params": {"beta": 5.0, "alpha": 1200.0, "layer_frac": WMDP_LAYER_FRAC}}})
class AdaptiveRMU(RMU):
    config_cls = AdaptiveRMUConfig

    def setup(self, model, ref, forget_batch: dict) -> None:
        super().setup(model, ref, forget_batch)
        h = ref.hidden(forget_batch, self.layer)
        self.coef = float(self.cfg.beta * mean_token_norm(h, self._mask(forget_batch)))
