"""Small shared helpers: seeding, data directory, cache directory, atomic file writes."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

from obliviate.errors import ConfigError, ObliviateError

SEED_LIMIT = 2**32
"""Seeds are integers in ``[0, SEED_LIMIT)``: what ``np.random.seed`` takes (``torch.manual_seed`` takes
``[-2**63, 2**64)`` and ``np.random.default_rng`` any integer >= 0), the same on every backend."""


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` if it is an integer in ``[0, 2**32)``, else a one-line :class:`ConfigError` naming ``name``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer in [0, 2**32), got {repr(seed)[:80]}")
    if not 0 <= seed < SEED_LIMIT:
        shown = str(seed) if len(str(seed)) <= 80 else f"an integer of {len(str(seed))} digits"
        raise ConfigError(f"{name} must be an integer in [0, 2**32) = [0, {SEED_LIMIT - 1}], got {shown}")
    return int(seed)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators; ConfigError for a seed outside ``[0, 2**32)``."""
    seed = check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def data_dir() -> Path:
    """``$OBLIVIATE_DATA``, else ``../shared/data`` relative to the working directory."""
    env = os.environ.get("OBLIVIATE_DATA")
    return Path(env) if env else Path("..") / "shared" / "data"


def cache_dir() -> Path:
    """Where base models are cached by config hash: ``$OBLIVIATE_CACHE`` or ``.cache/obliviate``."""
    env = os.environ.get("OBLIVIATE_CACHE")
    return Path(env) if env else Path(".cache") / "obliviate"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; on failure the old file (if any) is kept and no temporary is left.

    An ``OSError`` (full disk, read-only or missing permissions) becomes an :class:`ObliviateError`
    naming the file: ``cannot write results.json in DIR: [Errno 28] No space left on device``.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise ObliviateError(f"cannot write {path.name} in {path.parent}: {_os_reason(e)}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _os_reason(e: OSError) -> str:
    return f"[Errno {e.errno}] {e.strerror}" if e.errno and e.strerror else (str(e) or type(e).__name__)
