"""Cosine RMU (Atil, Gupta, Passonneau 2026, "Model Unlearning Objectives Vary for Distinct
Language Functions"). Reconstruction from the paper's summary (METHODS.md §2).

RMU with a direction-only forget loss at decoder layer l:

    L_forget = mean_{b,t} (1 - cos(h_l(x_f)_{bt}, u)),    u = r / ||r||, r ~ U[0,1)^d (once per topic)
    L_retain = alpha * mean_{b,t,j} (h_l(x_r; theta) - h_l(x_r; frozen))^2          (retain="mse", as RMU)
            or alpha * mean_{b,t} (1 - cos(h_l(x_r; theta), h_l(x_r; frozen)))       (retain="cosine")

Means run over valid (non-padding) tokens when ``mask_padding``. No steering
coefficient: only the direction of h_l is pushed to u, its norm is free. Same
conventions as :mod:`obliviate.methods.rmu`: layer l defaults to the middle
layer, only the MLP down-projections of layers l-n+1..l train, the forward pass
stops after layer l, and u comes from the same seeded generator.

The retain weight alpha can be learned by REINFORCE instead of fixed, see
:mod:`obliviate.meta_alpha`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from obliviate.errors import ConfigError
from obliviate.losses import masked_mean
from obliviate.methods import register
from obliviate.methods._shared import random_unit_vector, rmu_forget_loss
from obliviate.methods.rmu import hidden_at, resolve_layer, rmu_trainable


@dataclass
class CosineRMUConfig:
    layer: int | None = None
    """Decoder layer l whose output is steered; None = the middle layer (n_layers // 2)."""
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


def cosine_distance(h: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """mean over valid (b, t) of 1 - cos(h_bt, target_bt); ``target`` broadcasts against h (B, T, d).

    Zero where h is parallel to the target, 1 where orthogonal, 2 where opposite.
    """
    h = h.float()
    target = target.float().expand_as(h)
    dist = 1.0 - F.cosine_similarity(h, target, dim=-1, eps=1e-8)  # (B, T)
    return dist.mean() if mask is None else masked_mean(dist, mask.bool())


@register("cosine_rmu")
class CosineRMU:
    config_cls = CosineRMUConfig
    needs_reference = True

    def __init__(self, cfg: CosineRMUConfig):
        self.cfg = cfg
        self.layer: int | None = None
        self._u: dict[int, torch.Tensor] = {}

    def trainable(self, model) -> list[str]:
        self.layer = resolve_layer(model, self.cfg.layer)
        return rmu_trainable(model, self.layer, self.cfg.n_train_layers)

    def setup(self, model, ref, forget_batch: dict) -> None:
        self.layer = resolve_layer(model, self.cfg.layer)

    def control(self, topic: int, d: int, device) -> torch.Tensor:
        if topic not in self._u:
            self._u[topic] = random_unit_vector(d, self.cfg.seed + topic, device)
        return self._u[topic]

    def _mask(self, batch):
        return batch["attention_mask"] if self.cfg.mask_padding else None

    def loss(self, model, batch, ref) -> dict:
        f, r = batch["forget"], batch["retain"]
        l = self.layer
        h_f = hidden_at(model, f, l)  # (B, T, d)
        d = h_f.size(-1)
        topics = f.get("topic")
        if topics is None:
            u = self.control(0, d, h_f.device)[None, None, :]  # (1, 1, d)
        else:
            u = torch.stack([self.control(int(t), d, h_f.device) for t in topics])[:, None, :]  # (B, 1, d)
        forget = cosine_distance(h_f, u, self._mask(f))
        h_r = hidden_at(model, r, l)
        h_r_ref = ref.hidden(r, l)
        if self.cfg.retain == "mse":
            retain = rmu_forget_loss(h_r, h_r_ref, self._mask(r))  # RMU's masked MSE
        else:
            retain = cosine_distance(h_r, h_r_ref, self._mask(r))
        return {"forget": forget, "retain": self.cfg.alpha * retain}
