"""Teach a model a task's data, as TOFU's first step does: ``obliviate finetune``.

The model is trained on the task's forget and retain data together (QA pairs with the loss on
the answer and eos only; documents with the loss on every token), through the one training
loop, for ``epochs`` passes over the data with a cosine schedule. The defaults depend on the
model's size (:func:`obliviate.methods.preset_name`): a model under 100M parameters (the tiny
random-init ones tests use, or obliviate's own) takes ``lr=3e-3`` for 40 epochs (at least 200 steps), a larger
one TOFU's ``lr=1e-5`` for 5 epochs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from obliviate.config import to_dict
from obliviate.data import collate, encode_data
from obliviate.errors import ConfigError, DataError
from obliviate.losses import lm_loss
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import Data, PromptFormat
from obliviate.train.config import TrainConfig
from obliviate.train.loop import train
from obliviate.train.sampler import StepSampler

PRESETS = {"tiny": {"epochs": 40, "lr": 3e-3, "min_steps": 200},
           "paper": {"epochs": 5, "lr": 1e-5, "min_steps": 0}}
"""Fine-tuning defaults by model size (see the module docstring). ``min_steps``: a tiny model learning a
small data set from scratch needs a few hundred steps whatever the epoch count (40 epochs of 32 QA pairs
are only 80 steps of 16)."""


@dataclass
class FinetuneConfig:
    epochs: int | None = None
    """Passes over the data (default: the size preset's)."""
    lr: float | None = None
    """Peak learning rate (default: the size preset's)."""
    batch_size: int = 16
    max_len: int = 256
    """Longest training sequence; longer documents are split into windows (reported)."""
    warmup_frac: float = 0.1
    weight_decay: float = 0.0
    data: str = "both"
    """Which of the task's data to train on: ``both`` (forget + retain, the TOFU way), ``retain`` (a
    retain-only model, the oracle where the task has no other) or ``forget``."""
    checkpoint_every: int = 0
    seed: int = 0

    def __post_init__(self):
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError(f"config key 'epochs': must be >= 1, got {self.epochs}")
        if self.lr is not None and not (self.lr > 0 and self.lr < float("inf")):
            raise ConfigError(f"config key 'lr': must be a finite number > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ConfigError(f"config key 'batch_size': must be >= 1, got {self.batch_size}")
        if not 0 <= self.warmup_frac < 1:
            raise ConfigError(f"config key 'warmup_frac': must be in [0, 1), got {self.warmup_frac}")
        if self.data not in ("both", "retain", "forget"):
            raise ConfigError(f"config key 'data': must be both, retain or forget, got {self.data!r}")


def training_data(task, which: str) -> Data:
    """The data a fine-tune trains on: forget + retain, retain only or forget only. The retain data includes
    the part held out for the retain evaluation (``task.meta["retain_heldout"]``,
    :func:`obliviate.tasks.files.hold_out`): a model fine-tuned to know the task knows all of it; only the
    unlearning methods never train on it."""
    retain = (task.retain, task.meta.get("retain_heldout") or Data())
    parts = {"both": (task.forget, *retain), "retain": retain, "forget": (task.forget,)}[which]
    data = Data(qa=[x for d in parts for x in d.qa], docs=[x for d in parts for x in d.docs])
    if not data:
        raise DataError(f"task {task.name!r} has no {which} data to fine-tune on")
    return data


def finetune(model, tokenizer, data: Data, cfg: FinetuneConfig, out_dir: str | Path | None = None, *,
             prompt: PromptFormat | None = None, preset: str = "tiny", progress: bool | None = None,
             resume: bool = True, trainable: list[str] | None = None, state_hooks: tuple | None = None):
    """Train ``model`` (in place) on ``data``; returns ``(model, summary)`` with ``summary["data"]`` the
    encoding stats.

    ``trainable``: fnmatch patterns of the parameters to train (default: all); the others stay frozen.
    ``state_hooks``: state kept with the checkpoints beside the model's (:func:`~obliviate.train.loop.train`).
    """
    if preset not in PRESETS:
        raise ConfigError(f"unknown fine-tuning preset {preset!r} (valid: {', '.join(PRESETS)})")
    epochs = cfg.epochs or PRESETS[preset]["epochs"]
    lr = cfg.lr or PRESETS[preset]["lr"]
    limit = getattr(model.config, "max_position_embeddings",
                    None) or getattr(model.config, "n_positions", None)
    max_len = min(cfg.max_len, limit) if isinstance(limit, int) and limit > 1 else cfg.max_len
    ids, masks, stats = encode_data(tokenizer, data, prompt, max_len)
    sampler = StepSampler(len(ids), cfg.batch_size, cfg.seed, lengths=[len(x) for x in ids])
    steps = epochs * sampler.per_epoch
    if cfg.epochs is None:  # the preset's epochs, with its floor on steps
        steps = max(steps, PRESETS[preset]["min_steps"])
    pad = pad_id(tokenizer)
    device = next(model.parameters()).device

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        batch = collate([ids[i] for i in idx], pad, label_mask=[masks[i] for i in idx])
        return {k: v.to(device) for k, v in batch.items()}

    tcfg = TrainConfig(steps=steps, lr=lr, warmup_steps=int(cfg.warmup_frac * steps), schedule="cosine",
                       min_lr_ratio=0.1, weight_decay=cfg.weight_decay, grad_clip=1.0,
                       log_every=max(1, min(20, steps // 20)), checkpoint_every=cfg.checkpoint_every,
                       desc="finetune", trainable=list(trainable or ["*"]),
                       **({"progress": progress} if progress is not None else {}))
    summary = train(model, lambda m, b, s: {"lm": lm_loss(m, b)}, batch_fn, tcfg, out_dir, resume=resume,
                    state_hooks=state_hooks)
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    summary["data"] = {**stats, "max_len": max_len}
    summary["finetune"] = {**to_dict(cfg), "epochs": epochs, "lr": lr, "steps": steps, "preset": preset}
    return model, summary
