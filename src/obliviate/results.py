"""Run directories and the machine-readable ``results.json`` contract.

``results.json`` is written only when a command has finished, atomically
(temporary file in the same directory, fsync, rename), so a reader never sees
a half-written or "complete" file from an interrupted run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from obliviate.errors import ObliviateError


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("obliviate", "torch", "transformers", "tokenizers", "accelerate", "peft", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def _clean(obj: Any) -> Any:
    """Make metrics JSON-safe: tensors/numpy scalars to floats, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(_clean(obj), indent=2, sort_keys=True) + "\n")


def prepare_out_dir(out: str | Path) -> Path:
    """Create ``out`` (checking it is writable) and remove a stale results.json."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise ObliviateError(f"output directory {out} is not writable: {e.strerror or e}") from None
    stale = out / "results.json"
    if stale.exists():
        stale.unlink()
    return out


def write_results(out: str | Path, *, seed: int, config: Any, metrics: dict, **extra: Any) -> Path:
    """Write ``out/results.json`` atomically with status complete."""
    import dataclasses

    if dataclasses.is_dataclass(config):
        config = dataclasses.asdict(config)
    payload = {"status": "complete", "seed": seed, "config": config, "versions": versions(), "metrics": metrics}
    payload.update(extra)
    path = Path(out) / "results.json"
    atomic_write_json(path, payload)
    return path


def read_results(out: str | Path) -> dict:
    path = Path(out) / "results.json"
    with open(path) as f:
        return json.load(f)
