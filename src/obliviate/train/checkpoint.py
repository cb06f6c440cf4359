"""Checkpoints of the training loop: weights in safetensors, the rest in a weights-only torch file.

A checkpoint directory ``step_NNNNNNNN`` holds ``trainable.safetensors`` (the trained
parameters, full tensors even when the run was sharded), ``state.pt`` (optimizer, scheduler,
RNG states and the method's own state; read back with ``weights_only=True``) and
``trainer_state.json`` (the step, and the backend that wrote the optimizer state). It is
written to a temporary directory and renamed, so a checkpoint is either whole or absent.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import safetensors.torch as st

from obliviate.errors import ObliviateError
from obliviate.utils import atomic_write_text, run_write_path

log = logging.getLogger(__name__)


def rng_state() -> dict:
    """torch, numpy and Python RNG states as tensors (loadable with ``weights_only=True``)."""
    s = np.random.get_state()
    np_state = [s[0], s[1].tolist(), int(s[2]), int(s[3]), float(s[4])]
    return {"torch": torch.get_rng_state(), "numpy": _as_bytes(np_state),
            "python": _as_bytes(random.getstate()[1])}


def _as_bytes(value) -> torch.Tensor:
    return torch.tensor(np.frombuffer(json.dumps(value).encode(), dtype=np.uint8).copy())


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np_s = json.loads(bytes(state["numpy"].numpy()).decode())
    np.random.set_state((np_s[0], np.array(np_s[1], dtype=np.uint32), np_s[2], np_s[3], np_s[4]))
    py = json.loads(bytes(state["python"].numpy()).decode())
    random.setstate((3, tuple(py), None))


def save_checkpoint(ckpt_dir: Path, step: int, weights: dict[str, torch.Tensor], optimizer_state: dict,
                    scheduler_state: dict, *, backend: str = "single",
                    extra_state: dict | None = None) -> Path:
    """Write a checkpoint atomically (temporary directory, then rename); returns its directory."""
    final = run_write_path(ckpt_dir / f"step_{step:08d}")  # no link followed
    tmp = run_write_path(ckpt_dir / f".tmp_step_{step:08d}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    st.save_file({n: t.detach().contiguous() for n, t in weights.items()}, str(tmp / "trainable.safetensors"))
    torch.save({"optimizer": optimizer_state, "scheduler": scheduler_state, "rng": rng_state(),
                "extra": extra_state or {}}, tmp / "state.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, "backend": backend}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


class UnreadableCheckpoint(ObliviateError):
    """A checkpoint whose files are truncated, corrupt or missing (resuming skips it for an earlier one)."""


def read_checkpoint(path: Path, backend: str = "single") -> tuple[int, dict[str, torch.Tensor], dict]:
    """``(step, weights, state)`` of the checkpoint at ``path``; refuses one whose optimizer state another
    backend wrote (a sharded run's optimizer state is keyed by parameter name, a plain run's by index).

    :class:`UnreadableCheckpoint` names the file when ``trainer_state.json`` is not a JSON object with an
    integer ``step``, or ``state.pt`` / ``trainable.safetensors`` do not load (truncated, corrupt,
    missing)."""
    try:
        meta = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError) as e:  # also bad UTF-8
        raise UnreadableCheckpoint(f"trainer_state.json does not load ({_one_line(e)})") from None
    if not isinstance(meta, dict) or isinstance(meta.get("step"),
                                                bool) or not isinstance(meta.get("step"), int) \
            or meta["step"] < 1:
        raise UnreadableCheckpoint("trainer_state.json holds no step (expected "
                                   "a JSON object with an integer 'step' >= 1)")
    wrote = meta.get("backend", "single")
    if not isinstance(wrote, str):
        raise UnreadableCheckpoint(f"trainer_state.json names no backend (got {wrote!r})")
    if _family(wrote) != _family(backend):
        raise ObliviateError(f"checkpoint {path} was written by a {wrote} run and cannot resume a {backend} "
                             "run; resume with the launch that wrote it, or start afresh (--no-resume)")
    try:
        state = torch.load(path / "state.pt", weights_only=True)
    # EOFError, RuntimeError (zip), UnpicklingError, OSError: whatever a torn file gives
    except Exception as e:
        raise UnreadableCheckpoint(f"state.pt does not load ({_one_line(e)})") from None
    if not isinstance(state, dict) or not {"optimizer", "scheduler", "rng"} <= set(state):
        raise UnreadableCheckpoint("state.pt lacks the optimizer, scheduler or RNG state")
    try:
        weights = st.load_file(str(path / "trainable.safetensors"))
    except Exception as e:  # SafetensorError (truncated header or data), OSError (missing)
        raise UnreadableCheckpoint(f"trainable.safetensors does not load ({_one_line(e)})") from None
    return meta["step"], weights, state


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 160 else text[:160] + "..."


def resume_checkpoint(model: torch.nn.Module, ckpt_dir: Path | None, backend: str = "single",
                      say: bool = True) -> tuple[Path | None, int, dict | None]:
    """Load the newest finished checkpoint under ``ckpt_dir`` that loads into ``model``: ``(its directory,
    step, state)``, or ``(None, 0, None)`` when none does (the run starts from step 0).

    A checkpoint that does not load (:class:`UnreadableCheckpoint`: a truncated weights file or
    ``state.pt``, a bad ``trainer_state.json``, weights of other names or shapes) is skipped for the one
    before it, with one line on stderr (``say``) naming it, why, and where the run resumes instead."""
    skipped = []
    found = None
    for path in reversed(finished(ckpt_dir)):
        try:
            step, weights, state = read_checkpoint(path, backend)
            check_weights(model, weights, path)
        except UnreadableCheckpoint as e:
            skipped.append((path, str(e)))
            continue
        load_weights(model, weights, path)
        found = (path, step, state)
        break
    if say:
        instead = f"resuming from {found[0].name} instead" if found else "starting from step 0"
        for path, why in skipped:
            log.warning("skipping checkpoint %s: %s; %s", path, why, instead)
    return found or (None, 0, None)


def _family(backend: str) -> str:
    return "plain" if backend in ("single", "ddp") else backend


def check_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: Path) -> None:
    """Refuse checkpointed ``weights`` that do not fit ``model``: a name it lacks is an
    :class:`ObliviateError` (another model's checkpoint), a tensor of another shape an
    :class:`UnreadableCheckpoint`."""
    params = dict(model.named_parameters())
    for n, t in weights.items():
        if n not in params:
            raise ObliviateError(f"checkpoint {where} has parameter '{n}' that the model lacks")
        if tuple(t.shape) != tuple(params[n].shape):
            raise UnreadableCheckpoint(f"trainable.safetensors holds '{n}' of shape {tuple(t.shape)}, the "
                                       f"model's is {tuple(params[n].shape)}")


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: Path) -> None:
    """Copy checkpointed ``weights`` into ``model``'s parameters of the same names (all checked first, by
    :func:`check_weights`, so a refused checkpoint changes nothing)."""
    check_weights(model, weights, where)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, t in weights.items():
            params[n].copy_(t)


def latest_checkpoint(ckpt_dir: Path | None) -> Path | None:
    """The newest finished checkpoint under ``ckpt_dir``, or None."""
    done = finished(ckpt_dir)
    return done[-1] if done else None


def finished(ckpt_dir: Path | None) -> list[Path]:
    if ckpt_dir is None or not ckpt_dir.is_dir():
        return []
    return sorted(p for p in ckpt_dir.glob("step_*") if (p / "trainer_state.json").exists())


def prune(ckpt_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` finished checkpoints."""
    for p in finished(ckpt_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop the records of ``path`` logged after ``max_step`` (and any torn line): a resumed run rewrites
    them."""
    if not run_write_path(path).exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                keep.append(line)
        except json.JSONDecodeError:
            continue
    atomic_write_text(path, "".join(l + "\n" for l in keep))  # replaced, never written through a link
