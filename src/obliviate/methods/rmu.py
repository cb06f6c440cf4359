"""RMU: Representation Misdirection for Unlearning (Li et al. 2024, WMDP); Adaptive RMU: :mod:`.adaptive_rmu`.

At decoder layer l:

    L_forget = mean_{b,t,j} (h_l(x_f)_{btj} - c * u_j)^2,   u = r / ||r||, r ~ U[0,1)^d (once per topic)
    L_retain = alpha * mean_{b,t,j} (h_l(x_r; theta) - h_l(x_r; frozen))^2

Only the MLP down-projections of layers l-2..l train. Zephyr-7B defaults: l = 7, c = 6.5, alpha = 1200,
lr 5e-5, 150 batches.

Details: docs/methods.md, "rmu" under "Method details".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from obliviate.config import check_ranges
from obliviate.errors import ConfigError
from obliviate.losses import at_least_float32, hidden_mse, masked_mean
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import random_unit_vector
from obliviate.models.layers import check_layer, hidden_states_at, num_layers, param_names_for


WMDP_LAYER_FRAC = 7 / 32
"""WMDP's RMU layer as a fraction of the depth: layer 7 of Zephyr-7B's 32."""

TINY_PRESET_LAYER_FRAC = 0.5
"""The tiny presets' layer fraction: n_layers // 2, the layer those presets were tuned with."""

TINY_COEF_NORM = 1.5
"""The tiny preset's c is at least this many times the measured hidden-state norm: the world's tuned ratio (c
= 20 at a mean norm of 12.5 on world seed 0's base model, layer 2: 1.6), rounded down so that the world keeps
c = 20."""


@dataclass
class RMUConfig:
    layer: int | None = None
    """Decoder layer l whose output is steered; None = from ``layer_frac`` (:func:`rmu_layer`)."""
    layer_frac: float = WMDP_LAYER_FRAC
    """With ``layer`` unset: l = the layer nearest to layer_frac * n_layers (7/32: WMDP's layer 7 of 32)."""
    coef: float = 6.5
    """Steering coefficient c (with ``coef_norm`` > 0: its floor)."""
    coef_norm: float = 0.0
    """> 0: c = max(coef, coef_norm * mean ||h_l^ref(x_f)||), the norm measured with the frozen model on the
    first forget batch (:func:`hidden_norm`, as Adaptive RMU's); 0: c = coef."""
    alpha: float = 1200.0
    """Weight of the retain MSE."""
    n_train_layers: int = 3
    """Train the MLP down-projections of layers l-n+1..l."""
    mask_padding: bool = True
    seed: int = 0
    """Seed of the random control vector u (one per topic: seed + topic)."""

    def __post_init__(self):
        if self.n_train_layers < 1:
            raise ConfigError(f"config key 'n_train_layers': must be >= 1, got {self.n_train_layers}")
        check_layer_frac(self.layer_frac)
        check_ranges(self, nonnegative=("alpha", "coef_norm"), indices=("layer",))


def check_layer_frac(frac: float) -> None:
    if not 0.0 <= frac <= 1.0:
        raise ConfigError(f"config key 'layer_frac': must be in [0, 1], got {frac}")


def rmu_layer(n_layers: int, layer_frac: float) -> int:
    """The layer nearest to ``layer_frac * n_layers``, halves rounded down, in 0..n_layers-1.

    Rounding halves down makes ``layer_frac = 0.5`` exactly ``n_layers // 2``; 7/32 of 32 is 7.
    """
    return min(max(math.ceil(layer_frac * n_layers - 0.5), 0), n_layers - 1)


def resolve_layer(model, layer: int | None, layer_frac: float = WMDP_LAYER_FRAC) -> int:
    l = rmu_layer(num_layers(model), layer_frac) if layer is None else layer
    check_layer(model, l)
    return l


def rmu_trainable(model, layer: int, n_train_layers: int) -> list[str]:
    layers = list(range(max(0, layer - n_train_layers + 1), layer + 1))
    return param_names_for(model, "mlp_down", layers)


def mean_token_norm(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """mean over valid (b, t) of ||h_bt||: (B, T, d) -> a scalar."""
    norms = at_least_float32(h).norm(dim=-1)  # (B, T)
    return norms.mean() if mask is None else masked_mean(norms, mask.bool())


def hidden_norm(ref, batch: dict, layer: int, mask: torch.Tensor | None) -> float:
    """The frozen model's mean token norm of layer ``layer``'s output on ``batch``: what the RMU family's
    steering coefficient is measured against (RMU's ``coef_norm``, Adaptive RMU's ``beta``)."""
    with torch.no_grad():
        return float(mean_token_norm(ref.hidden(batch, layer), mask))


def hidden_at(model, batch: dict, layer: int) -> torch.Tensor:
    return hidden_states_at(model, batch["input_ids"], batch["attention_mask"], [layer],
                            stop_after=layer)[layer]


@register("rmu", paper="Li et al. 2024, WMDP (arXiv:2403.03218)",
          equation="mean ‖h_l(x_f) − c u‖² + α mean ‖h_l(x_r) − h_l^ref(x_r)‖²",
          trains="MLP down-projections of layers l−2..l",
          presets={"tiny": {"lr": 1e-3, "steps": 50,
                            "params": {"coef": 20.0, "coef_norm": TINY_COEF_NORM, "alpha": 10.0,
                                       "layer_frac": TINY_PRESET_LAYER_FRAC}},
                   "paper": {"lr": 5e-5, "steps": 150,
                             "params": {"coef": 6.5, "alpha": 1200.0, "layer_frac": WMDP_LAYER_FRAC}}},
          search=weighted_search("alpha"))
class RMU(Method):
    config_cls = RMUConfig
    needs_reference = True
    scaling = ("layer: a fraction of depth (tiny 1/2, paper 7/32); tiny c = max(20, 1.5 × measured ‖h_l‖): "
               "the world's ratio (20 at ‖h‖ 12.5), its 20 as the floor; paper c = 6.5 as published; lr: × "
               "the fine-tuning run's lr over its preset's; steps fixed (tune searches them)")

    def __init__(self, cfg: RMUConfig):
        super().__init__(cfg)
        self.layer: int | None = None
        self.coef = getattr(cfg, "coef", None)  # cosine RMU has no steering coefficient
        self._u: dict[int, torch.Tensor] = {}

    def trainable(self, model) -> list[str]:
        self.layer = resolve_layer(model, self.cfg.layer, self.cfg.layer_frac)
        return rmu_trainable(model, self.layer, self.cfg.n_train_layers)

    def reference_depth(self) -> int | None:
        return self.layer  # the frozen h_l of the retain term and of the coefficient's norm: layers 0..l

    def cached_hidden_layers(self) -> dict[str, tuple[int, ...]]:
        # the loss reads the frozen h_l of the retain examples only (the norm is read in setup); unmasked
        # padding
        # would read the states at padded positions, which depend on the batch: then a frozen prefix
        return {"retain": (self.layer,)} if self.cfg.mask_padding else {}

    def setup(self, model, ref, batch: dict) -> None:
        self.layer = resolve_layer(model, self.cfg.layer, self.cfg.layer_frac)
        f = batch["forget"]
        if getattr(self.cfg, "coef_norm", 0.0):  # the steering target must not be small beside h_l itself
            self.coef = max(self.cfg.coef,
                            self.cfg.coef_norm * hidden_norm(ref, f, self.layer, self._mask(f)))

    def control(self, topic: int, d: int, device) -> torch.Tensor:
        if topic not in self._u:
            self._u[topic] = random_unit_vector(d, self.cfg.seed + topic, device)
        return self._u[topic]

    def _mask(self, batch):
        return batch["attention_mask"] if self.cfg.mask_padding else None

    def controls(self, batch: dict, d: int, device) -> torch.Tensor:
        """The unit control vector of each forget example's topic: (1, 1, d) or (B, 1, d)."""
        topics = batch.get("topic")
        if topics is None:
            return self.control(0, d, device)[None, None, :]
        return torch.stack([self.control(int(t), d, device) for t in topics])[:, None, :]

    def forget_term(self, h_f: torch.Tensor, u: torch.Tensor, mask) -> torch.Tensor:
        return hidden_mse(h_f, (self.coef * u).expand_as(h_f), mask)

    def retain_term(self, h_r: torch.Tensor, h_r_ref: torch.Tensor, mask) -> torch.Tensor:
        return hidden_mse(h_r, h_r_ref, mask)

    def loss(self, model, batch, ref) -> dict:
        f, r = batch["forget"], batch["retain"]
        h_f = hidden_at(model, f, self.layer)  # (B, T, d)
        forget = self.forget_term(h_f, self.controls(f, h_f.size(-1), h_f.device), self._mask(f))
        retain = self.retain_term(hidden_at(model, r, self.layer), ref.hidden(r, self.layer, "retain"),
                                  self._mask(r))
        return {"forget": forget, "retain": self.cfg.alpha * retain}
