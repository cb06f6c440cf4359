"""The order of the training data: each step's batch indices, a pure function of the step."""

from __future__ import annotations

import numpy as np

from obliviate.data import TokenDataset, collate
from obliviate.errors import ObliviateError


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

    def step_tokens(self, lengths, steps: int) -> list[int]:
        """Tokens in each of the first ``steps`` batches, ``lengths`` giving each example's length."""
        lengths = np.asarray(lengths)
        return [int(lengths[self(s)].sum()) for s in range(steps)]


def make_lm_batches(dataset: TokenDataset, batch_size: int, seed: int, pad_id: int, label_masks=None,
                    extra: dict | None = None):
    """``batch_fn(step)``: the step's :class:`StepSampler` batch of ``dataset``'s sequences, padded with
    ``pad_id`` (language-model batches: labels are the inputs; with ``label_masks``, one 0/1 array per
    sequence, a token marked 0 is never a target: loss masking; ``extra``: ``{key: one int array per
    sequence}``, each a (B, T) tensor of the batch, padded with -1)."""
    sampler = StepSampler(len(dataset), batch_size, seed)

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        return collate([dataset.input_ids[i] for i in idx], pad_id,
                       label_mask=None if label_masks is None else [label_masks[i] for i in idx],
                       extra=None if extra is None else {k: [v[i] for i in idx] for k, v in extra.items()})

    return batch_fn
