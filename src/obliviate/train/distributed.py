"""Several processes: the collectives and checks of the one training loop.

Rank and world size, the launch checks (:func:`check_launch`, :func:`check_method`: methods that cannot
run in several processes or sharded stop before training), process ``r`` of ``W``'s rows of the global
batch (:func:`shard_rows`), loss-term means and gradients averaged over processes
(:func:`all_reduce_mean`, :func:`average_gradients`; why not ``DistributedDataParallel``), the
broadcast from rank 0, and rank-0-only saving. The backends that use them: :mod:`obliviate.train.backend`.
See docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from obliviate.errors import ConfigError, ObliviateError
from obliviate.models.load import save_model

SHARDING_ENV = {"fsdp": "ACCELERATE_USE_FSDP", "deepspeed": "ACCELERATE_USE_DEEPSPEED"}
"""The environment flags ``accelerate launch`` sets for a sharded config."""
SHARDING_LABEL = {"fsdp": "FSDP", "deepspeed": "DeepSpeed ZeRO"}
BUCKET_ELEMENTS = 1 << 24
"""Gradients are all-reduced in flat buckets of at most this many elements (64 MiB in fp32)."""


# ------------------------------------------------------------------ who am I

def _dist(init: bool = True):
    """``torch.distributed`` if a process group is up, else None.

    In a launched run whose group is not up yet (accelerate starts it lazily, at the first
    ``Accelerator``), ``init`` starts it now, so that a barrier before the first training
    step is a real one.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return None
    if not dist.is_initialized() and init and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        process_device()
    return dist if dist.is_initialized() else None


def world_size() -> int:
    """Number of processes: the process group's size, else ``$WORLD_SIZE`` (set by the launchers), else 1."""
    dist = _dist(init=False)
    return dist.get_world_size() if dist else int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    """This process's index: the process group's rank, else ``$RANK``, else 0."""
    dist = _dist(init=False)
    return dist.get_rank() if dist else int(os.environ.get("RANK", "0") or 0)


def is_main_process() -> bool:
    """True in rank 0 (and in a plain single-process run): the one process that writes files."""
    return rank() == 0


def two_at_a_time() -> bool:
    """Whether work can run two at a time in forked processes here
    (:func:`obliviate.runs.parts.cached_parts`): two CPUs or more, one process (no ``accelerate launch``), no
    sharding, no CUDA (a forked child cannot use it) and the ``fork`` start method (Linux, macOS)."""
    import multiprocessing as mp

    return ((os.cpu_count() or 1) >= 2 and world_size() == 1 and not sharding()
            and "fork" in mp.get_all_start_methods() and not torch.cuda.is_initialized())


def sharding() -> str | None:
    """``"fsdp"`` or ``"deepspeed"`` when the accelerate config shards the model, else None."""
    for mode, var in SHARDING_ENV.items():
        if os.environ.get(var, "false").lower() in ("1", "true", "yes"):
            return mode
    return None


def check_launch() -> None:
    """Refuse a launch that asks for sharding but would not shard: one process (``accelerate launch --cpu``
    starts one whatever ``--num_processes`` says; so does a plain ``python`` with the flag set)."""
    mode = sharding()
    if mode is not None and world_size() < 2:
        raise ConfigError(f"{SHARDING_ENV[mode]} asks for sharding by {SHARDING_LABEL[mode]}, but this "
                          "launch runs 1 process, so nothing would be sharded; launch 2 or more (e.g. "
                          "torchrun --nproc_per_node 2, see "
                          f"docs/distributed.md) or unset {SHARDING_ENV[mode]}")


def process_device() -> torch.device:
    """The device this process trains on.

    In a launched run (``world_size() > 1``) this sets up accelerate's process state (and with it
    the process group: gloo on CPUs, NCCL on GPUs) and returns its device (``cuda:<local rank>``);
    otherwise CUDA if available, else the CPU, as the training loop's own ``Accelerator`` chooses.
    """
    if world_size() > 1:
        from accelerate import PartialState

        return PartialState(cpu=not torch.cuda.is_available()).device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def barrier() -> None:
    """Wait for every process (a no-op in one process)."""
    dist = _dist()
    if dist and dist.get_world_size() > 1:
        dist.barrier()


@contextlib.contextmanager
def main_process_first() -> Iterator[None]:
    """Rank 0 runs the block first (e.g. to fill a cache), then the other processes run it."""
    if not is_main_process():
        barrier()
    yield
    if is_main_process():
        barrier()


# ------------------------------------------------------------------ data

def shard_rows(batch, index: int, count: int):
    """Process ``index`` of ``count``'s rows of a (nested) batch: rows ``[index*B//count,
    (index+1)*B//count)``.

    Every tensor of one or more dimensions and every list/tuple is cut along its first
    axis (its own length B); other values pass through. A sub-batch with fewer rows than
    processes is an error (a process would get no rows).
    """
    if count == 1:
        return batch
    if isinstance(batch, dict):
        return {k: shard_rows(v, index, count) for k, v in batch.items()}
    if torch.is_tensor(batch) and batch.dim() == 0:
        return batch
    if torch.is_tensor(batch) or isinstance(batch, (list, tuple, np.ndarray)):
        n = len(batch)
        if n < count:
            raise ConfigError(f"a batch of {n} rows cannot be split over {count} processes: raise the batch "
                              f"size to at least {count} (it is the global batch, over all processes)")
        return batch[index * n // count:(index + 1) * n // count]
    return batch


def to_device(batch, device: torch.device):
    """A (nested) batch with its tensors on ``device`` (tensors already there are returned as is)."""
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch.to(device) if torch.is_tensor(batch) else batch


# ------------------------------------------------------------------ collectives

def all_reduce_mean(values: torch.Tensor) -> torch.Tensor:
    """Mean over processes of a tensor (a copy; the input is untouched)."""
    dist = _dist()
    out = values.detach().clone()
    if dist and dist.get_world_size() > 1:
        dist.all_reduce(out)
        out /= dist.get_world_size()
    return out


def _buckets(tensors: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    groups: dict[tuple, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    for group in groups.values():
        bucket, size = [], 0
        for t in group:
            if bucket and size + t.numel() > BUCKET_ELEMENTS:
                yield bucket
                bucket, size = [], 0
            bucket.append(t)
            size += t.numel()
        if bucket:
            yield bucket


def average_gradients(params: Iterable[torch.Tensor]) -> None:
    """Replace each parameter's ``.grad`` by its mean over processes (in place).

    A parameter without a gradient on some process counts as zero there; one without a
    gradient on every process keeps ``grad = None`` (so AdamW skips it, as in one process).
    """
    dist = _dist()
    if not dist or dist.get_world_size() <= 1:
        return
    params = list(params)
    if not params:
        return
    w = dist.get_world_size()
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=params[0].device)
    dist.all_reduce(has)
    for p, h in zip(params, has.tolist()):
        if h > 0 and p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p, h in zip(params, has.tolist()) if h > 0]
    for bucket in _buckets(grads):
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat)
        flat /= w
        offset = 0
        for g in bucket:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def broadcast_from_main(tensors: Iterable[torch.Tensor]) -> None:
    """Copy rank 0's values of the floating-point ``tensors`` (parameters, buffers) into every process, in
    place."""
    dist = _dist()
    if not dist or dist.get_world_size() <= 1:
        return
    with torch.no_grad():
        for bucket in _buckets([t.data for t in tensors if t.is_floating_point()]):
            flat = torch.cat([t.reshape(-1) for t in bucket])
            dist.broadcast(flat, 0)
            offset = 0
            for t in bucket:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()


# ------------------------------------------------------------------ what can run where

def method_limits(method) -> tuple[str | None, str | None]:
    """``(why it cannot run in several processes, why it cannot run on a sharded model)``; None = it can.

    A method declares these as attributes (or properties, when they depend on its state):
    ``multiprocess_unsupported`` and ``sharding_unsupported``, each a reason or None. Edit
    methods (``kind = "edit"``) never reach the training loop: each process edits its whole,
    unsharded model the same way, sharded launch or not.
    """
    return getattr(method, "multiprocess_unsupported", None), getattr(method, "sharding_unsupported", None)


def check_method(method) -> None:
    """Raise :class:`ObliviateError` if ``method`` cannot run in this launch; a no-op in one plain process.

    Called where a method starts (:func:`obliviate.unlearning.engine.unlearn`, and before an edit), so
    that a run that cannot work stops before any training, naming the method and the reason.
    """
    check_launch()
    name = getattr(method, "name", type(method).__name__)
    multi, shard = method_limits(method)
    mode = sharding()
    if mode is not None and shard:
        raise ObliviateError(f"method {name!r} cannot run on a model sharded by {SHARDING_LABEL[mode]}: "
                             f"{shard}; use the DDP config (configs/accelerate/ddp.yaml) or one process")
    n = world_size()
    if n > 1 and multi:
        raise ObliviateError(f"method {name!r} cannot run in {n} processes: {multi}; run it in one process")


# ------------------------------------------------------------------ saving

def save_trained(model, directory, tokenizer=None) -> None:
    """Save a trained model (and tokenizer) from rank 0 only; every process waits until it is written.

    The model is whole in every process after any run, sharded ones included (the training loop
    gathers a sharded copy back into it), so rank 0's own tensors are the full weights.
    """

    if is_main_process():
        save_model(model, str(directory), tokenizer)  # both in one folder that replaces directory whole
    barrier()
