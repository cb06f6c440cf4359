"""Small shared helpers: seeding, data directory, cache directory."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def data_dir() -> Path:
    """``$OBLIVIATE_DATA``, else ``../shared/data`` relative to the working directory."""
    env = os.environ.get("OBLIVIATE_DATA")
    return Path(env) if env else Path("..") / "shared" / "data"


def cache_dir() -> Path:
    """Where base models are cached by config hash: ``$OBLIVIATE_CACHE`` or ``.cache/obliviate``."""
    env = os.environ.get("OBLIVIATE_CACHE")
    return Path(env) if env else Path(".cache") / "obliviate"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
