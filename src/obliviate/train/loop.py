"""One plain training loop: ``train(model, loss_fn, batch_fn, ...)`` sums the named loss terms ``loss_fn``
returns, backpropagates, clips, steps AdamW and the schedule, logs every term, and checkpoints for an exact
resume.

The contract, exact resume and several processes: docs/architecture.md, "The training loop"; checkpoints:
:mod:`obliviate.train.checkpoint`; where the model lives: :mod:`obliviate.train.backend`.
"""

from __future__ import annotations

import json
import math
import shutil
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable, Collection

import torch
from tqdm.auto import tqdm

from obliviate.config import to_dict
from obliviate.errors import ConfigError, ObliviateError
from obliviate.train import distributed as D
from obliviate.train.backend import backend_for, make_accelerator, trainable_tensors
from obliviate.train.checkpoint import (latest_checkpoint, prune, resume_checkpoint, save_checkpoint,
                                        set_rng_state,
                                        truncate_jsonl)
from obliviate.train.config import TrainConfig
from obliviate.train.trackers import close_trackers, open_trackers
from obliviate.utils import open_run_file, run_write_path


class TrainingDiverged(ObliviateError):
    """A loss term, the gradient norm or the trained weights became NaN or infinite."""


def select_trainable(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Freeze every parameter whose name matches none of ``patterns``.

    Returns the trainable names. A pattern that matches nothing is an error,
    raised before any training starts.
    """
    names = [n for n, _ in model.named_parameters()]
    for pat in patterns:
        if not any(fnmatch(n, pat) for n in names):
            sample = ", ".join(names[:4])
            raise ConfigError(f"parameter pattern '{pat}' matches no parameter of the model "
                              f"(names look like: {sample}, ...)")
    chosen = []
    for n, p in model.named_parameters():
        p.requires_grad_(any(fnmatch(n, pat) for pat in patterns))
        if p.requires_grad:
            chosen.append(n)
    return chosen


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer of every training run: AdamW over ``params`` with ``cfg``'s learning rate, betas and
    weight decay."""
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)


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


# ---------------------------------------------------------------- the loop

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
    eval_steps: Collection[int] | None = None,
    extra_params: list[torch.nn.Parameter] | None = None,
    state_hooks: tuple[Callable[[], dict], Callable[[dict], None]] | None = None,
    accelerator=None,
) -> dict:
    """Run ``cfg.steps`` optimizer steps; return a summary with the log history.

    ``eval_fn(model, step)`` (if given) runs at step 0, every ``eval_every``
    steps and at the end; its metrics go to ``metrics.jsonl`` with the step.
    ``eval_steps`` (a set of steps, e.g. log-spaced) replaces ``eval_every`` where given.
    ``extra_params`` are additional trainable tensors (not model parameters)
    optimised alongside the model. ``state_hooks = (get, set)`` adds state that
    lives outside the model (e.g. a method's own learned scorer) to checkpoints:
    ``get()`` returns a dict of tensors/primitives, ``set(d)`` restores it.

    In several processes ``batch_fn(step)`` must return the same global batch in
    every process (it does when it is a pure function of the step); each process
    trains on its rows of it (:func:`obliviate.train.distributed.shard_rows`) and
    ``eval_fn`` runs in every process (rank 0 logs it). With a sharded model
    (FSDP2 / DeepSpeed ZeRO-3) the loop trains a sharded copy and, at the end, gathers
    its weights back into ``model`` in every process (:mod:`obliviate.train.backend`).
    """
    acc = accelerator or make_accelerator()
    backend = backend_for(acc, cfg.grad_clip)
    if cfg.checkpoint_every and not backend.checkpoints:
        raise ConfigError(f"config key 'checkpoint_every': {backend.NO_CHECKPOINTS}")
    select_trainable(model, cfg.trainable)
    if not trainable_tensors(model, extra_params):
        raise ConfigError("nothing to train: every parameter is frozen")
    original = model
    out = Path(out_dir) if out_dir is not None else None
    ckpt_dir = out / "checkpoints" if out else None
    metrics_path = out / "metrics.jsonl" if out else None
    main, world = acc.is_main_process, acc.num_processes
    last, start, saved = None, 0, None
    if out is not None and resume:  # weights go into the plain model, before any sharding
        # skips one that won't load
        last, start, saved = resume_checkpoint(model, ckpt_dir, backend.name, say=main)
    if world > 1:
        D.barrier()  # every process has read its checkpoint before rank 0 changes the directory

    model, optimizer, params = backend.prepare(model, extra_params, lambda p: make_optimizer(p, cfg),
                                               batch_fn)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(cfg))
    if saved is not None:
        backend.load_optimizer_state(model, optimizer, saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        set_rng_state(saved["rng"])
        if state_hooks is not None and saved.get("extra"):
            state_hooks[1](saved["extra"])
    if out is not None:
        run_write_path(out).mkdir(parents=True, exist_ok=True)
        if main and last is None and not resume and ckpt_dir.exists():
            shutil.rmtree(run_write_path(ckpt_dir))
        if main:
            if start == 0 and run_write_path(metrics_path).exists():
                metrics_path.unlink()
            truncate_jsonl(metrics_path, start)
        if world > 1:
            D.barrier()

    history: list[dict] = []
    trackers = open_trackers(cfg.report_to, out, cfg.desc, to_dict(cfg)) if main and cfg.report_to else []

    def log(rec: dict) -> None:
        history.append(rec)
        if metrics_path is not None and main:
            with open_run_file(metrics_path) as f:  # never through a link
                f.write(json.dumps(rec) + "\n")
        for t in trackers:
            t.log(rec, rec["step"])

    def evaluate(step: int) -> None:
        model.eval()
        log({"step": step, **eval_fn(model, step)})
        model.train()

    def diverged(what: str) -> TrainingDiverged:
        where = f"; last good checkpoint: {latest_checkpoint(ckpt_dir)}" if ckpt_dir else ""
        return TrainingDiverged(what + where)

    if eval_fn is not None and start == 0:
        evaluate(0)
    model.train()
    bar = tqdm(total=cfg.steps, initial=start, desc=cfg.desc, disable=not cfg.progress or not main,
               dynamic_ncols=True, leave=False)
    running: dict[str, float] = {}
    n_running = 0
    last_ckpt_step = start
    try:
        for step in range(start, cfg.steps):
            batch = backend.local(batch_fn(step))
            with backend.loss_context():
                terms = loss_fn(model, batch, step)
            if not terms:
                raise ObliviateError("the loss function returned no loss terms")
            total = sum(terms.values())
            logged = backend.mean(terms, total)
            for name in terms:
                if not math.isfinite(logged[name]):
                    raise diverged(f"loss term '{name}' is {logged[name]} at step {step + 1}")
            optimizer.zero_grad(set_to_none=True)
            backend.backward(total, params)
            # the total gradient norm (max_norm inf: measured, not clipped); None where the backend clips
            # itself
            gnorm = backend.clip(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
            if gnorm is not None and not math.isfinite(gnorm) and getattr(acc, "scaler", None) is None:
                # finite loss terms but a NaN/inf gradient: stop before the step corrupts the weights
                # (an fp16 grad scaler skips such steps by itself, so then the step goes ahead)
                raise diverged(f"gradient norm is {gnorm} at step {step + 1} "
                               f"(loss terms {', '.join(terms)} finite)")
            try:
                optimizer.step()
            except RuntimeError as e:  # torch's "value cannot be converted to type float without overflow"
                if "overflow" not in str(e):
                    raise
                raise diverged(f"the optimizer step at step {step + 1} overflows the parameters' dtype "
                               f"(lr={cfg.lr:g} too large?)") from None
            scheduler.step()
            for name, value in logged.items():
                running[name] = running.get(name, 0.0) + value
            n_running += 1
            done = step + 1
            bar.update(1)
            if done % cfg.log_every == 0 or done == cfg.steps:
                rec = {"step": done, "lr": scheduler.get_last_lr()[0],
                       "grad_norm": float("nan") if gnorm is None else gnorm}
                rec.update({k: v / n_running for k, v in running.items()})
                bar.set_postfix(loss=f"{rec['loss']:.4f}")
                log(rec)
                running, n_running = {}, 0
            read = (done in eval_steps if eval_steps is not None
                    else bool(eval_every) and done % eval_every == 0)
            if eval_fn is not None and read and done != cfg.steps:
                evaluate(done)
            if (ckpt_dir is not None and cfg.checkpoint_every and done % cfg.checkpoint_every == 0
                    and done != cfg.steps):
                weights = backend.weights(model)  # collectives when sharded: every process takes part
                opt_state = backend.optimizer_state(model, optimizer)
                if main:
                    save_checkpoint(ckpt_dir, done, weights, opt_state, scheduler.state_dict(),
                                    backend=backend.name,
                                    extra_state=state_hooks[0]() if state_hooks else None)
                    prune(ckpt_dir, cfg.keep_checkpoints)
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
        # an lr so large that the last steps overflowed the weights: never saved as finished
        if cfg.steps > start:
            bad = _first_non_finite(model, extra_params)
            # every process stops, or none (sharded: each holds its own part)
            if backend.any(bad is not None):
                raise TrainingDiverged(f"{bad or 'a parameter on another process'} holds NaN or infinite "
                                       f"values after step {cfg.steps} (lr={cfg.lr:g} too large?); the "
                                       "trained weights are not usable")
        if eval_fn is not None and cfg.steps > start:
            log({"step": cfg.steps, **eval_fn(model, cfg.steps)})
    finally:
        close_trackers(trackers)
    backend.finish(original, model)
    return {"history": history, "resumed_from": start, "last_checkpoint": last_ckpt_step}


def _first_non_finite(model: torch.nn.Module, extra_params=None) -> str | None:
    """``"parameter 'NAME'"`` for the first trained tensor holding NaN or inf, else None (one isfinite
    pass)."""
    named = [(f"parameter '{n}'", p) for n, p in model.named_parameters() if p.requires_grad]
    named += [(f"extra parameter {i}", p) for i, p in enumerate(extra_params or [])]
    for name, p in named:
        # a shard of an FSDP2 parameter: this process's part
        p = p.to_local() if hasattr(p, "to_local") else p
        if p.is_floating_point() and p.numel() and not bool(torch.isfinite(p.detach()).all()):
            return name
    return None
