"""The training loop's settings (:class:`TrainConfig`), checked when built."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from obliviate.errors import ConfigError
from obliviate.train.trackers import check_trackers, default_trackers


@dataclass
class TrainConfig:
    steps: int = 300
    """Number of optimizer steps."""
    lr: float = 3e-3
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 0
    schedule: Literal["constant", "linear", "cosine"] = "cosine"
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of ``lr`` (linear/cosine)."""
    grad_clip: float = 1.0
    """Max global grad norm; 0 disables clipping."""
    log_every: int = 10
    checkpoint_every: int = 0
    """Save a checkpoint every N steps (0: only the final state is kept in memory)."""
    keep_checkpoints: int = 1
    trainable: list[str] = field(default_factory=lambda: ["*"])
    """fnmatch patterns over parameter names; others are frozen."""
    progress: bool = True
    desc: str = "train"
    report_to: list[str] = field(default_factory=default_trackers)
    """Experiment trackers that also get every logged record: ``tensorboard``, ``mlflow``, ``wandb``
    (:mod:`obliviate.train.trackers`)."""

    def __post_init__(self):
        check_trackers(self.report_to)
        if self.steps < 0:
            raise ConfigError(f"config key 'steps': must be >= 0, got {self.steps}")
        for key in ("lr", "weight_decay", "beta1", "beta2", "min_lr_ratio", "grad_clip"):
            value = getattr(self, key)
            try:
                finite = not isinstance(value, bool) and math.isfinite(value)  # numpy scalars too
            except TypeError:
                finite = False
            if not finite:
                raise ConfigError(f"config key '{key}': must be a finite number, got {repr(value)[:80]}")
        if self.lr <= 0:
            raise ConfigError(f"config key 'lr': must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ConfigError(f"config key 'weight_decay': must be >= 0, got {self.weight_decay}")
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be in [0, 1), got {getattr(self, key)}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"config key 'min_lr_ratio': must be in [0, 1], got {self.min_lr_ratio}")
        if self.grad_clip < 0:
            raise ConfigError("config key 'grad_clip': must be >= 0 (0 "
                              f"disables clipping), got {self.grad_clip}")
        if self.warmup_steps < 0:
            raise ConfigError(f"config key 'warmup_steps': must be >= 0, got {self.warmup_steps}")
        if self.keep_checkpoints < 1:
            raise ConfigError(f"config key 'keep_checkpoints': must be >= 1, got {self.keep_checkpoints}")
        if self.log_every < 1:
            raise ConfigError(f"config key 'log_every': must be >= 1, got {self.log_every}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"config key 'checkpoint_every': must be >= 0, got {self.checkpoint_every}")
        if not self.trainable:
            raise ConfigError("config key 'trainable': needs at least one parameter pattern")
