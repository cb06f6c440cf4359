"""Filtering strategies for pretraining: loss masking, removal, document drop, label noise (docs/methods.md).

Each strategy turns a :class:`~obliviate.data.TokenDataset` and per-token forget-domain flags into a
:class:`FilteredDataset` (token ids plus per-token loss weights for :func:`obliviate.losses.lm_loss`),
under the ``"input"`` (default, the authors') or ``"target"`` position convention. Conventions,
strategies and a worked example: docs/methods.md#machinery-shared-by-several-methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from obliviate.data import TokenDataset, pack_sequences
from obliviate.errors import ConfigError, DataError
from obliviate.losses import IGNORE_INDEX
from obliviate.train import StepSampler

STRATEGIES = ("none", "mask", "remove", "drop_document")
CONVENTIONS = ("input", "target")


@dataclass
class FilteredDataset(TokenDataset):
    """A :class:`TokenDataset` whose tokens carry loss weights (and possibly substituted ids)."""

    weights: list[np.ndarray] = field(default_factory=list)
    """Per-token float weights aligned with ``input_ids`` (weight of predicting that token)."""
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Indices of the original sequences that were kept (all but dropped documents)."""

    def n_trained_tokens(self) -> float:
        """Sum of weights on positions that are targets (position 0 of each sequence never is)."""
        return float(sum(w[1:].sum() for w in self.weights))


def _check_flags(dataset: TokenDataset, flags: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(flags) != len(dataset):
        raise DataError(f"got flags for {len(flags)} sequences, dataset has {len(dataset)}")
    out = []
    for i, (ids, f) in enumerate(zip(dataset.input_ids, flags)):
        f = np.asarray(f).astype(bool)
        if f.shape != (len(ids),):
            raise DataError(f"flags of sequence {i + 1} have shape "
                            f"{f.shape}, the sequence has {len(ids)} tokens")
        out.append(f)
    return out


def loss_weights(flags: np.ndarray, convention: str = "input") -> np.ndarray:
    """Weights (T,) of the loss of predicting each token, for one sequence's flags (T,)."""
    if convention not in CONVENTIONS:
        raise ConfigError(f"unknown position convention {convention!r} (valid: {', '.join(CONVENTIONS)})")
    f = np.asarray(flags).astype(bool)
    if convention == "target":
        return (~f).astype(np.float32)
    w = np.ones(len(f), dtype=np.float32)
    w[1:] = ~f[:-1]
    return w


def add_label_noise(flags, p: float, seed: int = 0):
    """Flip each flag independently with probability ``p`` (seeded); same structure as ``flags``.

    ``flags`` is one bool array or a list of per-sequence arrays. ``p = 0`` returns copies.
    """
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"label noise p must be in [0, 1], got {p}")
    rng = np.random.default_rng(seed)
    if isinstance(flags, (list, tuple)):
        return [np.asarray(f).astype(bool) ^ (rng.random(len(f)) < p) for f in flags]
    f = np.asarray(flags).astype(bool)
    return f ^ (rng.random(f.shape) < p)


def flags_from_probs(probs: Sequence[np.ndarray], threshold: float) -> list[np.ndarray]:
    """Flag a token when its classifier probability is ``>= threshold``."""
    return [np.asarray(p) >= threshold for p in probs]


def document_flags(flags: Sequence[np.ndarray], min_fraction: float = 0.0) -> np.ndarray:
    """A sequence is flagged when the fraction of its flagged tokens is ``> min_fraction`` (0: any)."""
    return np.array([np.asarray(f, dtype=bool).mean() > min_fraction if len(f) else False for f in flags],
                    dtype=bool)


def apply_strategy(dataset: TokenDataset, flags: Sequence[np.ndarray] | None, strategy: str,
                   convention: str = "input", hidden_id: int | None = None,
                   doc_flags: Sequence[bool] | None = None) -> FilteredDataset:
    """Apply a filtering ``strategy`` (see module docstring) to ``dataset``."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown filtering strategy {strategy!r} (valid: {', '.join(STRATEGIES)})")
    if convention not in CONVENTIONS:
        raise ConfigError(f"unknown position convention {convention!r} (valid: {', '.join(CONVENTIONS)})")
    n = len(dataset)
    if strategy == "none":
        flags = [np.zeros(len(s), dtype=bool) for s in dataset.input_ids]
    elif strategy == "drop_document" and flags is None and doc_flags is not None:
        flags = [np.zeros(len(s), dtype=bool) for s in dataset.input_ids]
    elif flags is None:
        raise ConfigError(f"strategy {strategy!r} needs per-token flags")
    flags = _check_flags(dataset, flags)

    keep = np.arange(n)
    if strategy == "drop_document":
        doc = document_flags(flags) if doc_flags is None else np.asarray(doc_flags, dtype=bool)
        if doc.shape != (n,):
            raise DataError(f"got {doc.shape[0] if doc.ndim else 0} document flags for {n} sequences")
        keep = np.flatnonzero(~doc)
        if len(keep) == 0:
            raise DataError("document filtering dropped every sequence")

    if strategy == "remove":
        if hidden_id is None:
            raise ConfigError("strategy 'remove' needs hidden_id (the <|hidden|> token id)")
        ids = [np.where(f, np.int64(hidden_id), np.asarray(s, dtype=np.int64))
               for s, f in zip(dataset.input_ids, flags)]
    else:
        ids = [np.asarray(s, dtype=np.int64).copy() for s in dataset.input_ids]
    if strategy in ("mask", "remove"):
        weights = [loss_weights(f, convention) for f in flags]
    else:
        weights = [np.ones(len(s), dtype=np.float32) for s in ids]

    return FilteredDataset(
        input_ids=[ids[i] for i in keep],
        labels={k: [v[i] for i in keep] for k, v in dataset.labels.items()},
        vocab=dict(dataset.vocab),
        weights=[weights[i] for i in keep],
        kept=keep,
    )


def collate_weighted(seqs: Sequence[np.ndarray], weights: Sequence[np.ndarray], pad_id: int) -> dict:
    """Right-padded batch with ``loss_weights`` (B, T) float (0 on padding) for :func:`lm_loss`."""
    T = max(len(s) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    att = torch.zeros((B, T), dtype=torch.long)
    w = torch.zeros((B, T), dtype=torch.float32)
    for i, (s, wi) in enumerate(zip(seqs, weights)):
        ids[i, :len(s)] = torch.as_tensor(s)
        att[i, :len(s)] = 1
        w[i, :len(s)] = torch.as_tensor(wi, dtype=torch.float32)
    labels = ids.masked_fill(att == 0, IGNORE_INDEX)
    return {"input_ids": ids, "attention_mask": att, "labels": labels, "loss_weights": w}


def make_batch_fn(dataset: FilteredDataset, batch_size: int, seed: int, pad_id: int):
    """``batch_fn(step)`` for :func:`obliviate.train.train` (a pure function of the step)."""

    sampler = StepSampler(len(dataset), batch_size, seed)

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        return collate_weighted([dataset.input_ids[i] for i in idx], [dataset.weights[i] for i in idx],
                                pad_id)

    return batch_fn


def pack_filtered(dataset: FilteredDataset, row_len: int) -> FilteredDataset:
    """:func:`obliviate.data.pack_sequences` that carries the weights along (``kept`` is then empty)."""

    key = "\0weights"
    packed = pack_sequences(TokenDataset(dataset.input_ids, {**dataset.labels, key: dataset.weights},
                                         dict(dataset.vocab)), row_len)
    weights = packed.labels.pop(key)
    return FilteredDataset(packed.input_ids, packed.labels, packed.vocab, weights=weights)
