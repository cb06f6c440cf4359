"""Small shared helpers: seeding, data directory, cache directory."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from obliviate.errors import ConfigError

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


