"""Per-layer linear probes on last-token hidden states (a reconstruction; docs/recipes.md, function-specific).

Per layer, an L2-regularised logistic regression (C = 1) separates toxic from neutral texts' last-token states
(the last non-padding token, skipping a trailing eos); the probe direction is ``d_l = w_l / ||w_l||``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from obliviate.data import collate
from obliviate.errors import ConfigError, DataError
from obliviate.models.layers import gather_last, states_over_batches
from obliviate.models.tokenizer import bos_prefix, pad_id


def default_probe_layers(n_layers: int) -> list[int]:
    """Early, middle and late layers: ``[n//4, n//2, 3n//4]`` (all layers when n < 3).

    4 layers -> [1, 2, 3]; 32 layers -> [8, 16, 24].
    """
    if n_layers < 1:
        raise ConfigError(f"n_layers must be >= 1, got {n_layers}")
    if n_layers < 3:
        return list(range(n_layers))
    return [n_layers // 4, n_layers // 2, (3 * n_layers) // 4]


def last_token_states(model, tokenizer, texts: Sequence[str], layers: Sequence[int], batch_size: int = 32,
                      max_len: int | None = 256) -> dict[int, np.ndarray]:
    """``{l: (N, d) float32 array}``: each text's last-token hidden state at decoder layer l.

    Texts are encoded as bos + text (no eos; the first ``max_len`` tokens, all with None), right-padded; the
    forward pass stops after the highest requested layer
    (:func:`obliviate.models.layers.states_over_batches`).
    """
    if not texts:
        raise DataError("no texts to compute hidden states of")
    head = bos_prefix(tokenizer)
    seqs = [np.asarray((head + tokenizer(t, add_special_tokens=False)["input_ids"])[:max_len], dtype=np.int64)
            for t in texts]
    pad = pad_id(tokenizer)
    batches = (collate(seqs[i:i + batch_size], pad) for i in range(0, len(seqs), batch_size))
    return {l: h.numpy() for l, h in states_over_batches(model, batches, layers, at="last").items()}


def fit_probe_directions(states: dict[int, np.ndarray], y: Sequence[int], C: float = 1.0, seed: int = 0,
                         holdout: float = 0.25) -> dict[int, dict]:
    """Per layer: ``{"direction": unit vector d_l (d,), "accuracy", "train_accuracy"}``.

    The direction comes from an L2 logistic regression (``C``) fitted on all rows.
    ``accuracy`` is that of a second probe fitted on a seeded, stratified
    ``1 - holdout`` share and scored on the rest (equal to ``train_accuracy`` when
    ``holdout`` is 0 or a class has fewer than 4 examples).
    """
    from sklearn.linear_model import LogisticRegression

    y = np.asarray(y).astype(int)
    if set(np.unique(y)) != {0, 1}:
        raise DataError(f"probe labels must contain both classes 0 and 1, got {sorted(set(y.tolist()))}")
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    if holdout > 0 and min((y == 0).sum(), (y == 1).sum()) >= 4:
        for c in (0, 1):
            idx = np.flatnonzero(y == c)
            test[rng.permutation(idx)[:max(1, int(round(holdout * len(idx))))]] = True

    def fit(X, t):
        return LogisticRegression(C=C, max_iter=2000, random_state=seed).fit(X, t)

    out = {}
    for l, X in states.items():
        X = np.asarray(X, dtype=np.float64)
        if len(X) != len(y):
            raise DataError(f"layer {l}: {len(X)} states but {len(y)} labels")
        clf = fit(X, y)
        w = clf.coef_[0]
        norm = np.linalg.norm(w)
        direction = w / norm if norm > 0 else w
        train_acc = float(clf.score(X, y))
        acc = float(fit(X[~test], y[~test]).score(X[test], y[test])) if test.any() else train_acc
        out[l] = {"direction": direction.astype(np.float32), "accuracy": acc, "train_accuracy": train_acc}
    return out


def pairwise_cosine(directions: dict[int, np.ndarray] | Sequence[np.ndarray]) -> np.ndarray:
    """Matrix of cosine similarities between directions (in the dict's / sequence's order)."""
    vecs = list(directions.values()) if isinstance(directions, dict) else list(directions)
    V = np.stack([np.asarray(v, dtype=np.float64) for v in vecs])
    V = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
    return V @ V.T


def toxic_probe_data(world) -> tuple[list[str], list[int]]:
    """The world's toxic register as probe data: (texts, labels), toxic = 1, neutral = 0."""
    tox = world.toxic
    texts = [s["text"] for s in tox["toxic_sentences"]] + [s["text"] for s in tox["neutral_sentences"]]
    y = [1] * len(tox["toxic_sentences"]) + [0] * len(tox["neutral_sentences"])
    if not tox["toxic_sentences"]:
        raise DataError("the world has no toxic register (WorldConfig.n_toxic = 0)")
    return texts, y


def probe_directions(model, tokenizer, texts: Sequence[str], y: Sequence[int], layers: Sequence[int],
                     C: float = 1.0, seed: int = 0) -> dict[int, dict]:
    """:func:`last_token_states` then :func:`fit_probe_directions`."""
    return fit_probe_directions(last_token_states(model, tokenizer, texts, layers), y, C=C, seed=seed)


def probe_forget_loss(hs: dict[int, torch.Tensor], directions: dict[int, torch.Tensor],
                      index: torch.Tensor) -> torch.Tensor:
    """(1/|L|) sum_l mean_b <h_l[b, index_b], d_l>^2 with hs[l] (B, T, d) and d_l (d,)."""
    terms = []
    for l, d in directions.items():
        h = gather_last(hs[l], index).float()  # (B, d)
        terms.append((h @ d.to(h.device, h.dtype)).pow(2).mean())
    return torch.stack(terms).mean()
