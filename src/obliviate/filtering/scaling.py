"""Scaling and compute slowdown (authors' ``analysis/scaling.py``): sizes trained on ``20 * params`` tokens,
``C = 6 N D``; a fit ``log L = a + b log C`` on the unfiltered models gives a filtered model's equivalent
compute ``C_eq`` and its slowdown ``C_f / C_eq``; :func:`tokens_to_recover` for adversarial fine-tuning.
docs/recipes.md, "token-filtering".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from obliviate.errors import ConfigError, DataError

CHINCHILLA_RATIO = 20


@dataclass(frozen=True)
class FilteredModels:
    """The models filtered pretraining trains on the world, at every scale: their sizes and the shape of their
    data. The token-filtering recipe's defaults, and the models ``obliviate bench`` times the token classifier
    against."""

    sizes: tuple[str, ...] = ("1x16", "2x32", "3x48", "4x64", "4x96")
    """Sizes ``"<layers>x<width>"`` (:func:`~obliviate.models.builders.parse_size`) of the full scaling
    runs."""
    quick_sizes: tuple[str, ...] = ("1x16", "2x24", "2x32", "3x40")
    """... and of the quick ones."""
    vocab_size: int = 512
    """BPE vocabulary of the world tokenizer they share (a small one keeps the unembedding from dominating the
    compute of the smallest models)."""
    row_len: int = 256
    """Tokens per packed row."""
    batch_size: int = 8
    """Rows per pretraining step."""


FILTERED_MODELS = FilteredModels()


def training_flops(params: float, tokens: float) -> float:
    """``6 N D``: forward + backward FLOPs of training ``params`` parameters on ``tokens`` tokens."""
    return 6.0 * float(params) * float(tokens)


def tokens_for(params: float, ratio: float = CHINCHILLA_RATIO) -> int:
    """Training tokens for a model of ``params`` parameters: ``ratio * params`` (20: Chinchilla)."""
    if params <= 0 or ratio <= 0:
        raise ConfigError(f"tokens_for needs params > 0 and ratio > 0, got {params}, {ratio}")
    return int(round(ratio * params))


def geometric_sizes(smallest: float, largest: float, n: int) -> list[int]:
    """``n`` integers spaced geometrically from ``smallest`` to ``largest`` (inclusive)."""
    if n < 1 or smallest <= 0 or largest < smallest:
        raise ConfigError("geometric_sizes needs n >= 1 and 0 < smallest "
                          f"<= largest, got {smallest}, {largest}, {n}")
    if n == 1:
        return [int(round(smallest))]
    return [int(round(v)) for v in np.geomspace(smallest, largest, n)]


def fit_power_law(C: Sequence[float], L: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``log L = a + b log C`` (``L = exp(a) C^b``)."""
    c, l = np.asarray(C, dtype=np.float64), np.asarray(L, dtype=np.float64)
    if c.shape != l.shape or c.ndim != 1:
        raise DataError(f"fit_power_law needs two equal-length 1-D sequences, got {c.shape} and {l.shape}")
    if (c <= 0).any() or (l <= 0).any():
        raise DataError("fit_power_law needs positive compute and loss values")
    if len(np.unique(c)) < 2:
        raise DataError("fit_power_law needs at least two distinct compute values")
    X = np.stack([np.ones_like(c), np.log(c)], 1)
    (a, b), *_ = np.linalg.lstsq(X, np.log(l), rcond=None)
    return float(a), float(b)


def equivalent_compute(fit: tuple[float, float], L: float) -> float:
    """Compute at which the fitted law reaches loss ``L``: ``exp((log L - a) / b)``."""
    a, b = fit
    if b == 0:
        raise DataError("the fitted power law is flat (b = 0): no equivalent compute")
    if L <= 0:
        raise DataError(f"loss must be positive, got {L}")
    return math.exp((math.log(L) - a) / b)


def compute_slowdown(fit: tuple[float, float], L_f: float, C_f: float) -> float:
    """``C_f / C_eq`` for a filtered model with loss ``L_f`` trained with compute ``C_f``."""
    return float(C_f) / equivalent_compute(fit, L_f)


def tokens_to_recover(curve: Sequence[tuple[float, float]], baseline_loss: float) -> float | None:
    """First ``tokens`` of a ``[(tokens, loss), ...]`` fine-tuning curve with ``loss <= baseline_loss``.

    Points are taken in order of tokens; ``None`` if the curve never gets there.
    """
    for tokens, loss in sorted(curve, key=lambda p: p[0]):
        if loss <= baseline_loss:
            return tokens
    return None
