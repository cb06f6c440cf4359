"""Adaptive RMU (Dang et al. 2025): RMU (:mod:`.rmu`) with the steering coefficient set from the model itself,

    c = beta * mean_{b,t} ||h_l(x_f)||,

measured with the frozen model on the first forget batch, before any update; beta = 5.
Presets as RMU's without c (tiny: alpha = 10).
"""

from __future__ import annotations

from dataclasses import dataclass

from obliviate.config import check_ranges
from obliviate.unlearning.contract import register, weighted_search
from obliviate.methods.rmu import RMU, TINY_PRESET_LAYER_FRAC, WMDP_LAYER_FRAC, RMUConfig, hidden_norm


@dataclass
class AdaptiveRMUConfig(RMUConfig):
    beta: float = 5.0
    """c = beta * mean ||h_l(x_f)|| on the first forget batch (frozen model)."""

    def __post_init__(self):
        super().__post_init__()
        check_ranges(self, positive=("beta",))


@register("adaptive_rmu", paper="Dang et al. 2025, Adaptive RMU",
          equation="RMU with c = β · mean ‖h_l^ref(x_f)‖ (frozen model, first batch)",
          trains="MLP down-projections of layers l−2..l",
          presets={"tiny": {"lr": 1e-3, "steps": 50,
                            "params": {"alpha": 10.0, "layer_frac": TINY_PRESET_LAYER_FRAC}},
                   "paper": {"lr": 5e-5, "steps": 150,
                             "params": {"beta": 5.0, "alpha": 1200.0, "layer_frac": WMDP_LAYER_FRAC}}},
          search=weighted_search("alpha"))
class AdaptiveRMU(RMU):
    config_cls = AdaptiveRMUConfig
    scaling = ("layer: a fraction of depth (tiny 1/2, paper 7/32); c = β × measured ‖h_l‖ (β = 5); lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def setup(self, model, ref, batch: dict) -> None:
        super().setup(model, ref, batch)
        self.coef = self.cfg.beta * hidden_norm(ref, batch["forget"], self.layer, self._mask(batch["forget"]))
