"""One plain training loop.

``train`` takes a model, a ``loss_fn(model, batch, step) -> {name: tensor}``
returning *named loss terms* (already scaled by their coefficients) and a
``batch_fn(step) -> batch`` that is a pure function of the step number. The loop
sums the terms, backpropagates, clips, steps AdamW and the schedule, logs every
term separately to ``metrics.jsonl`` and a progress bar, and checkpoints.

Exact resume: a checkpoint holds the model weights (safetensors), the optimizer
and scheduler state, the RNG states and the step. Because the data order is a
function of the step (see :class:`StepSampler`), a run killed at any point and
resumed from its last checkpoint finishes bit-for-bit like an uninterrupted one.

Several processes (``accelerate launch``, ``torchrun``): each process takes its rows
of the global batch, gradients are averaged over processes, logged terms are the
mean over processes and only rank 0 writes; see :mod:`obliviate.train.distributed`.
A single process runs exactly as before.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import torch

from obliviate.config import to_dict
from obliviate.errors import ConfigError, ObliviateError
from obliviate.train.trackers import check_trackers, close_trackers, default_trackers, open_trackers


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
            raise ConfigError(f"config key 'grad_clip': must be >= 0 (0 disables clipping), got {self.grad_clip}")
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


class TrainingDiverged(ObliviateError):
    """A loss term, the gradient norm or the trained weights became NaN or infinite."""


class StepSampler:
    """Indices of the examples in each step's batch, a pure function of the step.

    Epoch e uses the permutation ``default_rng(seed + e)``; step s takes the
    (s mod steps_per_epoch)-th slice of ``batch_size`` indices (last partial
    batch dropped unless the dataset is smaller than one batch).

    With ``lengths`` (one per example), batches are *length-grouped* to cut padding: the
    epoch's permutation is cut into chunks of ``group_chunk`` batches, each chunk is sorted
    by length and split into batches, and the order of all the epoch's batches is shuffled
    again (same seed), so every epoch still visits each example once, in random batches of
    similar length.
    """

    def __init__(self, n: int, batch_size: int, seed: int, shuffle: bool = True,
                 lengths=None, group_chunk: int = 50):
        if n <= 0:
            raise ObliviateError("cannot train on an empty dataset")
        if lengths is not None and len(lengths) != n:
            raise ObliviateError(f"StepSampler: {len(lengths)} lengths for {n} examples")
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.bs = min(batch_size, n)
        self.per_epoch = max(1, n // self.bs)
        self.lengths = None if lengths is None else np.asarray(lengths)
        self.group_chunk = max(1, group_chunk)
        self._cache: tuple[int, np.ndarray] | None = None

    def _perm(self, epoch: int) -> np.ndarray:
        if self._cache is None or self._cache[0] != epoch:
            rng = np.random.default_rng(self.seed + epoch)
            perm = rng.permutation(self.n) if self.shuffle else np.arange(self.n)
            if self.lengths is not None:
                perm = perm[:self.per_epoch * self.bs]
                chunk = self.group_chunk * self.bs
                parts = [p[np.argsort(self.lengths[p], kind="stable")] for p in
                         (perm[i:i + chunk] for i in range(0, len(perm), chunk))]
                batches = np.concatenate(parts).reshape(self.per_epoch, self.bs)
                perm = batches[rng.permutation(self.per_epoch) if self.shuffle else slice(None)].reshape(-1)
            self._cache = (epoch, perm)
        return self._cache[1]

    def __call__(self, step: int) -> np.ndarray:
        epoch, i = divmod(step, self.per_epoch)
        return self._perm(epoch)[i * self.bs:(i + 1) * self.bs]


def select_trainable(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Freeze every parameter whose name matches none of ``patterns``.

    Returns the trainable names. A pattern that matches nothing is an error,
    raised before any training starts.
    """
    names = [n for n, _ in model.named_parameters()]
    for pat in patterns:
        if not any(fnmatch(n, pat) for n in names):
            sample = ", ".join(names[:4])
            raise ConfigError(f"parameter pattern '{pat}' matches no parameter of the model (names look like: {sample}, ...)")
    chosen = []
    for n, p in model.named_parameters():
        p.requires_grad_(any(fnmatch(n, pat) for pat in patterns))
        if p.requires_grad:
            chosen.append(n)
    return chosen


def _lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    def f(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        span = max(1, cfg.steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        if cfg.schedule == "linear":
            return 1.0 - (1.0 - cfg.min_lr_ratio) * progress
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


# ---------------------------------------------------------------- checkpoints

def _rng_state() -> dict:
    return {
        "torch": torch.get_rng_state(),
        "numpy": torch.tensor(np.frombuffer(json.dumps(_np_state()).encode(), dtype=np.uint8).copy()),
        "python": torch.tensor(np.frombuffer(json.dumps(random.getstate()[1]).encode(), dtype=np.uint8).copy()),
    }


def _np_state() -> list:
    s = np.random.get_state()
    return [s[0], s[1].tolist(), int(s[2]), int(s[3]), float(s[4])]


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np_s = json.loads(bytes(state["numpy"].numpy()).decode())
    np.random.set_state((np_s[0], np.array(np_s[1], dtype=np.uint32), np_s[2], np_s[3], np_s[4]))
    py = json.loads(bytes(state["python"].numpy()).decode())
    random.setstate((3, tuple(py), None))


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(ckpt_dir: Path, step: int, model, optimizer, scheduler, extra: dict | None = None,
                    extra_state: dict | None = None) -> Path:
    """Write a checkpoint atomically (temporary directory, then rename)."""
    from safetensors.torch import save_file

    final = ckpt_dir / f"step_{step:08d}"
    tmp = ckpt_dir / f".tmp_step_{step:08d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file(_trainable_state(model), str(tmp / "trainable.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": _rng_state(),
                "extra": extra_state or {}}, tmp / "state.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **(extra or {})}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    if not ckpt_dir.is_dir():
        return None
    done = sorted(p for p in ckpt_dir.glob("step_*") if (p / "trainer_state.json").exists())
    return done[-1] if done else None


def load_checkpoint(path: Path, model, optimizer, scheduler, set_extra_state=None) -> int:
    from safetensors.torch import load_file

    weights = load_file(str(path / "trainable.safetensors"))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, t in weights.items():
            if n not in params:
                raise ObliviateError(f"checkpoint {path} has parameter '{n}' that the model lacks")
            params[n].copy_(t)
    state = torch.load(path / "state.pt", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
    if set_extra_state is not None and state.get("extra"):
        set_extra_state(state["extra"])
    return json.loads((path / "trainer_state.json").read_text())["step"]


def _prune(ckpt_dir: Path, keep: int) -> None:
    done = sorted(p for p in ckpt_dir.glob("step_*") if (p / "trainer_state.json").exists())
    for p in done[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------- the loop

def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                keep.append(line)
        except json.JSONDecodeError:
            continue
    path.write_text("".join(l + "\n" for l in keep))


def train(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, dict, int], dict[str, torch.Tensor]],
    batch_fn: Callable[[int], dict],
    cfg: TrainConfig,
    out_dir: str | Path | None = None,
    *,
    resume: bool = True,
    eval_fn: Callable[[torch.nn.Module, int], dict] | None = None,
    eval_every: int = 0,
    extra_params: list[torch.nn.Parameter] | None = None,
    state_hooks: tuple[Callable[[], dict], Callable[[dict], None]] | None = None,
    accelerator=None,
) -> dict:
    """Run ``cfg.steps`` optimizer steps; return a summary with the log history.

    ``eval_fn(model, step)`` (if given) runs at step 0, every ``eval_every``
    steps and at the end; its metrics go to ``metrics.jsonl`` with the step.
    ``extra_params`` are additional trainable tensors (not model parameters)
    optimised alongside the model. ``state_hooks = (get, set)`` adds state that
    lives outside the model (e.g. a method's own learned scorer) to checkpoints:
    ``get()`` returns a dict of tensors/primitives, ``set(d)`` restores it.

    In several processes ``batch_fn(step)`` must return the same global batch in
    every process (it does when it is a pure function of the step); each process
    trains on its rows of it (:func:`obliviate.train.distributed.shard_rows`) and
    ``eval_fn`` runs in every process (rank 0 logs it). With a sharded model
    (FSDP / DeepSpeed ZeRO-3) the summary also holds ``full_state_dict``, the
    gathered weights (on rank 0; see :func:`obliviate.train.distributed.save_trained`).
    """
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    from obliviate.train import distributed as D

    select_trainable(model, cfg.trainable)
    params = [p for p in model.parameters() if p.requires_grad] + list(extra_params or [])
    if not params:
        raise ConfigError("nothing to train: every parameter is frozen")
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(cfg))
    acc = accelerator or Accelerator(cpu=not torch.cuda.is_available())
    world, rank = acc.num_processes, acc.process_index
    sharded = D.sharding_of(acc)
    ddp = world > 1 and sharded is None  # data parallel by hand: see obliviate.train.distributed
    if sharded and cfg.checkpoint_every:
        raise ConfigError(f"config key 'checkpoint_every': checkpoints of a model sharded by "
                          f"{D.SHARDING_LABEL[sharded]} are not supported; set it to 0 or use DDP")
    if ddp:
        model.to(acc.device)
        optimizer = acc.prepare(optimizer)
    else:
        if sharded == "deepspeed":
            _deepspeed_micro_batch(acc, batch_fn)
        model, optimizer = acc.prepare(model, optimizer)
        if sharded:  # the wrapper owns new (sharded) parameters
            params = [p for p in model.parameters() if p.requires_grad] + list(extra_params or [])

    out = Path(out_dir) if out_dir is not None else None
    ckpt_dir = out / "checkpoints" if out else None
    metrics_path = out / "metrics.jsonl" if out else None
    main = acc.is_main_process
    start = 0
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        last = latest_checkpoint(ckpt_dir) if resume else None
        if world > 1:
            D.barrier()  # every process has looked for a checkpoint before rank 0 changes the directory
        if last is not None:
            start = load_checkpoint(last, acc.unwrap_model(model), optimizer, scheduler,
                                    state_hooks[1] if state_hooks else None)
        elif not resume and ckpt_dir.exists() and main:
            shutil.rmtree(ckpt_dir)
        if main:
            if start == 0 and metrics_path.exists():
                metrics_path.unlink()
            _truncate_jsonl(metrics_path, start)
        if world > 1:
            D.barrier()
    if ddp:
        D.broadcast_from_main([*model.parameters(), *model.buffers(), *(extra_params or [])])

    history: list[dict] = []

    trackers = open_trackers(cfg.report_to, out, cfg.desc, to_dict(cfg)) if main and cfg.report_to else []

    def log(rec: dict) -> None:
        history.append(rec)
        if metrics_path is not None and main:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        for t in trackers:
            t.log(rec, rec["step"])

    eval_model = model if sharded else acc.unwrap_model(model)
    if eval_fn is not None and start == 0:
        model.eval()
        log({"step": 0, **eval_fn(eval_model, 0)})
    model.train()
    bar = tqdm(total=cfg.steps, initial=start, desc=cfg.desc, disable=not cfg.progress or not main,
               dynamic_ncols=True, leave=False)
    running: dict[str, float] = {}
    n_running = 0
    last_ckpt_step = start
    try:
        for step in range(start, cfg.steps):
            batch = batch_fn(step)
            if world > 1 or sharded:
                batch = D.to_device(D.shard_rows(batch, rank, world), acc.device)
                with acc.autocast():
                    terms = loss_fn(model, batch, step)
            else:
                terms = loss_fn(model, batch, step)
            if not terms:
                raise ObliviateError("the loss function returned no loss terms")
            total = sum(terms.values())
            if world > 1 or sharded:  # the mean over processes of each term, checked and logged alike everywhere
                names = list(terms)
                means = D.all_reduce_mean(torch.stack([terms[n].detach().float().reshape(()) for n in names]
                                                      + [total.detach().float().reshape(())]))
                logged = dict(zip(names + ["loss"], means.tolist()))
            else:
                logged = None
            for name, value in terms.items():
                bad = not math.isfinite(logged[name]) if logged else not torch.isfinite(value).all()
                if bad:
                    where = f"; last good checkpoint: {latest_checkpoint(ckpt_dir)}" if ckpt_dir else ""
                    shown = logged[name] if logged else value.item()
                    raise TrainingDiverged(f"loss term '{name}' is {shown} at step {step + 1}{where}")
            optimizer.zero_grad(set_to_none=True)
            acc.backward(total)
            if ddp:
                D.average_gradients(params)
            # the total gradient norm (max_norm inf: measured, not clipped); None where the backend
            # (DeepSpeed) clips by itself and returns none
            gnorm = acc.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
            gnorm_known = gnorm is not None
            gnorm = float(gnorm) if gnorm_known else float("nan")
            if gnorm_known and not math.isfinite(gnorm) and getattr(acc, "scaler", None) is None:
                # finite loss terms but a NaN/inf gradient: stop before the step corrupts the weights
                # (an fp16 grad scaler skips such steps by itself, so then the step goes ahead)
                where = f"; last good checkpoint: {latest_checkpoint(ckpt_dir)}" if ckpt_dir else ""
                raise TrainingDiverged(f"gradient norm is {gnorm} at step {step + 1} (loss terms "
                                       f"{', '.join(terms)} finite){where}")
            try:
                optimizer.step()
            except RuntimeError as e:  # torch's "value cannot be converted to type float without overflow"
                if "overflow" not in str(e):
                    raise
                raise TrainingDiverged(f"the optimizer step at step {step + 1} overflows the parameters' dtype "
                                       f"(lr={cfg.lr:g} too large?)") from None
            scheduler.step()
            if logged is None:
                for name, value in terms.items():
                    running[name] = running.get(name, 0.0) + float(value.detach())
                running["loss"] = running.get("loss", 0.0) + float(total.detach())
            else:
                for name, value in logged.items():
                    running[name] = running.get(name, 0.0) + value
            n_running += 1
            done = step + 1
            bar.update(1)
            if done % cfg.log_every == 0 or done == cfg.steps:
                rec = {"step": done, "lr": scheduler.get_last_lr()[0], "grad_norm": gnorm}
                rec.update({k: v / n_running for k, v in running.items()})
                bar.set_postfix(loss=f"{rec['loss']:.4f}")
                log(rec)
                running, n_running = {}, 0
            if eval_fn is not None and eval_every and done % eval_every == 0 and done != cfg.steps:
                model.eval()
                log({"step": done, **eval_fn(eval_model, done)})
                model.train()
            if ckpt_dir is not None and cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done != cfg.steps:
                if main:
                    save_checkpoint(ckpt_dir, done, acc.unwrap_model(model), optimizer, scheduler,
                                    extra_state=state_hooks[0]() if state_hooks else None)
                    _prune(ckpt_dir, cfg.keep_checkpoints)
                if world > 1:
                    D.barrier()
                last_ckpt_step = done
    except BaseException:
        close_trackers(trackers)
        raise
    finally:
        bar.close()
    model.eval()
    try:
        if cfg.steps > start:  # an lr so large that the last steps overflowed the weights: never saved as finished
            bad = _first_non_finite(model, extra_params)
            if world > 1 or sharded:  # every process stops, or none (sharded: each holds only its own part)
                flag = D.all_reduce_mean(torch.tensor([float(bad is not None)], device=acc.device))
                bad = bad or ("a parameter on another process" if float(flag) > 0 else None)
            if bad is not None:
                raise TrainingDiverged(f"{bad} holds NaN or infinite values after step {cfg.steps} (lr={cfg.lr:g} "
                                       "too large?); the trained weights are not usable")
        if eval_fn is not None and cfg.steps > start:
            log({"step": cfg.steps, **eval_fn(eval_model, cfg.steps)})
    finally:
        close_trackers(trackers)
    summary = {"history": history, "resumed_from": start, "last_checkpoint": last_ckpt_step}
    if sharded:
        summary["full_state_dict"] = acc.get_state_dict(model)  # a collective: every process takes part
    return summary


def _first_non_finite(model: torch.nn.Module, extra_params=None) -> str | None:
    """``"parameter 'NAME'"`` for the first trained tensor holding NaN or inf, else None (one isfinite pass)."""
    named = [(f"parameter '{n}'", p) for n, p in model.named_parameters() if p.requires_grad]
    named += [(f"extra parameter {i}", p) for i, p in enumerate(extra_params or [])]
    for name, p in named:
        if p.is_floating_point() and p.numel() and not bool(torch.isfinite(p.detach()).all()):
            return name
    return None


def _deepspeed_micro_batch(acc, batch_fn) -> None:
    """DeepSpeed wants its per-process batch size in its config; take it from the first global batch."""
    ds = acc.state.deepspeed_plugin.deepspeed_config
    if ds.get("train_micro_batch_size_per_gpu") in (None, "auto"):
        rows = [len(v) for v in _leaves(batch_fn(0)) if torch.is_tensor(v) and v.dim() > 0]
        ds["train_micro_batch_size_per_gpu"] = max(1, (max(rows) if rows else 1) // acc.num_processes)
        ds["train_batch_size"] = ds["train_micro_batch_size_per_gpu"] * acc.num_processes


def _leaves(batch):
    if isinstance(batch, dict):
        for v in batch.values():
            yield from _leaves(v)
    else:
        yield batch
