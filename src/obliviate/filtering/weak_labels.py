"""Weak token labels from SAE latents (docs/methods.md; authors' ``data/med/sae/label-corpus.py``).

Residual activations of a labeller model -> :class:`~obliviate.filtering.sae.TopKSAE` codes -> the
domain latents (domain ratio on a calibration slice, or a judge) -> one threshold per latent -> the
labelling rule (at least ``min_latents`` above threshold, then window expansion). See
docs/methods.md#machinery-shared-by-several-methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from obliviate.data import TokenDataset
from obliviate.errors import ConfigError, DataError
from obliviate.filtering.sae import residual_activations


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def flatten(per_seq: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate per-sequence arrays (the row order of :func:`residual_activations`)."""
    return np.concatenate([np.asarray(a) for a in per_seq]) if len(per_seq) else np.zeros(0)


def split_flat(flat: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Inverse of :func:`flatten`: cut ``flat`` into pieces of ``lengths``."""
    flat = np.asarray(flat)
    if int(sum(lengths)) != len(flat):
        raise DataError(f"cannot split {len(flat)} rows into sequences of total length {int(sum(lengths))}")
    return np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []


def ground_truth(dataset: TokenDataset, field: str = "domain", value: str = "medicine") -> list[np.ndarray]:
    """Per-sequence bool arrays: token's ``field`` label equals ``value`` (the world's ground truth)."""
    if field not in dataset.labels:
        raise DataError(f"dataset has no label field {field!r} (has: {sorted(dataset.labels)})")
    names = dataset.vocab.get(field, [])
    if value not in names:
        return [np.zeros(len(a), dtype=bool) for a in dataset.labels[field]]
    code = names.index(value)
    return [np.asarray(a) == code for a in dataset.labels[field]]


def domain_runs(dataset: TokenDataset, domain: str, min_len: int = 4, inside: bool = True,
                field: str = "domain") -> list[np.ndarray]:
    """Contiguous runs (at least ``min_len`` tokens) of token ids whose ground-truth ``field`` label is
    ``domain`` (``inside``), or is another domain (not ``domain`` and not unlabelled ``"None"``)."""
    if field not in dataset.labels:
        raise DataError(f"dataset has no label field {field!r} (has: {sorted(dataset.labels)})")
    names = dataset.vocab[field]
    code = names.index(domain) if domain in names else -1
    none = names.index("None") if "None" in names else -2
    runs = []
    for ids, lab in zip(dataset.input_ids, dataset.labels[field]):
        lab = np.asarray(lab)
        m = (lab == code) if inside else ((lab != code) & (lab != none))
        t = 0
        while t < len(ids):
            if not m[t]:
                t += 1
                continue
            e = t
            while e < len(ids) and m[e]:
                e += 1
            if e - t >= min_len:
                runs.append(np.asarray(ids[t:e]))
            t = e
    return runs


# --------------------------------------------------------------------------- latent choice


def domain_ratio(codes, is_domain, eps: float = 1e-6) -> np.ndarray:
    """Per latent: (mean activation on domain tokens + eps) / (mean on other tokens + eps); shape (m,)."""
    z, dom = _np(codes).astype(np.float64), _np(is_domain).astype(bool)
    if len(z) != len(dom):
        raise DataError(f"codes have {len(z)} rows but is_domain has {len(dom)}")
    if dom.all() or not dom.any():
        raise DataError("the calibration slice needs both domain and non-domain tokens")
    return (z[dom].mean(0) + eps) / (z[~dom].mean(0) + eps)


def top_activating_tokens(codes, token_ids, decode: Callable[[int], str], latents: Sequence[int],
                          n: int = 20) -> dict[int, list[str]]:
    """For each latent, the strings of the (distinct) tokens with its ``n`` largest activations."""
    z, ids = _np(codes), _np(token_ids)
    out = {}
    for j in latents:
        order = np.argsort(-z[:, j], kind="stable")
        seen, toks = set(), []
        for i in order:
            if z[i, j] <= 0 or len(toks) >= n:
                break
            if int(ids[i]) not in seen:
                seen.add(int(ids[i]))
                toks.append(decode(int(ids[i])))
        out[int(j)] = toks
    return out


def _judge_says(judge, latent: int, tokens: list[str]) -> bool:
    # an EMBER judge (obliviate.methods.ember.judge): its judgement says whether to keep
    if hasattr(judge, "judge"):
        return judge.judge(latent, tokens, None).kept()
    return bool(judge(latent, tokens))


def select_domain_latents(codes, is_domain=None, *, judge=None,
                          top_tokens: dict[int, list[str]] | None = None,
                          min_ratio: float = 4.0, min_domain_freq: float = 0.02,
                          max_latents: int | None = 32) -> list[int]:
    """Domain latents by the ratio statistic (needs ``is_domain``) or by a judge (see module docstring).

    With a judge, candidates are the latents passing the statistic when ``is_domain`` is
    given, else every latent that ever fires; each candidate is kept if the judge says
    so (``top_tokens[latent]`` is shown to it). Returned most domain-specific first.
    """
    z = _np(codes)
    if is_domain is not None:
        dom = _np(is_domain).astype(bool)
        ratio = domain_ratio(z, dom)
        freq = (z[dom] > 0).mean(0)
        cand = [int(j) for j in np.argsort(-ratio, kind="stable")
                if ratio[j] >= min_ratio and freq[j] >= min_domain_freq]
    elif judge is not None:
        fires = (z > 0).sum(0)
        cand = [int(j) for j in np.argsort(-fires, kind="stable") if fires[j] > 0]
    else:
        raise ConfigError("select_domain_latents needs labelled calibration tokens (is_domain) or a judge")
    if judge is not None:
        if top_tokens is None:
            raise ConfigError("a judge needs top_tokens (see top_activating_tokens)")
        cand = [j for j in cand if _judge_says(judge, j, list(top_tokens.get(j, [])))]
    return cand[:max_latents] if max_latents is not None else cand


def latent_thresholds(domain_codes, quantile: float = 0.5) -> np.ndarray:
    """Per column: the ``quantile`` of its positive activations (``inf`` for a latent that never fires)."""
    if not 0.0 <= quantile <= 1.0:
        raise ConfigError(f"threshold quantile must be in [0, 1], got {quantile}")
    z = _np(domain_codes)
    out = np.full(z.shape[1], np.inf)
    for j in range(z.shape[1]):
        pos = z[:, j][z[:, j] > 0]
        if len(pos):
            out[j] = np.quantile(pos, quantile)
    return out


# --------------------------------------------------------------------------- the rule


def _boundaries(lengths: Sequence[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    if int(sum(lengths)) != n:
        raise DataError(f"sequence lengths sum to {int(sum(lengths))} but there are {n} tokens")
    ends = np.cumsum(lengths)
    is_start = np.zeros(n, dtype=bool)
    is_end = np.zeros(n, dtype=bool)
    is_start[(ends - np.asarray(lengths))[np.asarray(lengths) > 0]] = True
    is_end[(ends - 1)[np.asarray(lengths) > 0]] = True
    return is_start, is_end


def window_expand(seed, eligible, lengths: Sequence[int]) -> np.ndarray:
    """Grow ``seed`` into ``eligible`` neighbours (left or right), one step at a time, until no change."""
    lab = _np(seed).astype(bool).copy()
    ok = _np(eligible).astype(bool)
    is_start, is_end = _boundaries(lengths, len(lab))
    while True:
        left = np.zeros_like(lab)
        left[1:] = lab[:-1] & ~is_start[1:]  # left neighbour labelled, same sequence
        right = np.zeros_like(lab)
        right[:-1] = lab[1:] & ~is_end[:-1]
        new = ok & ~lab & (left | right)
        if not new.any():
            return lab
        lab |= new


def weak_labels(domain_codes, thresholds, lengths: Sequence[int], *, special=None, min_latents: int = 2,
                window: bool = True) -> np.ndarray:
    """Apply the labelling rule to ``domain_codes`` (N, L) (activations of the L domain latents only).

    ``lengths`` are the sequence lengths (rows are sequences back to back); ``special``
    (N,) bool marks tokens never labelled (bos/eos/pad). Returns bool (N,).
    """
    z = _np(domain_codes)
    thr = _np(thresholds).astype(np.float64)
    if z.ndim != 2 or z.shape[1] != len(thr):
        raise DataError(f"domain_codes shape {z.shape} does not match {len(thr)} thresholds")
    normal = np.ones(len(z), dtype=bool) if special is None else ~_np(special).astype(bool)
    seed = ((z > thr).sum(1) >= min_latents) & normal
    if not window:
        return seed
    return window_expand(seed, (z > 0).any(1) & normal, lengths)


def special_mask(input_ids: np.ndarray, special_ids: Sequence[int]) -> np.ndarray:
    """Bool mask of tokens whose id is in ``special_ids``."""
    return np.isin(np.asarray(input_ids), np.asarray(list(special_ids), dtype=np.int64))


def label_dataset(model, dataset: TokenDataset, sae, layer: int, latents: Sequence[int], thresholds,
                  special_ids: Sequence[int] = (), min_latents: int = 2, window: bool = True,
                  batch_size: int = 16, pad_id: int = 0) -> list[np.ndarray]:
    """Weak labels for every token of ``dataset`` (per-sequence bool arrays), end to end."""

    acts, _ = residual_activations(model, dataset, layer, batch_size=batch_size, pad_id=pad_id)
    codes = sae.encode_all(acts)[:, list(latents)]
    lengths = [len(s) for s in dataset.input_ids]
    special = special_mask(flatten(dataset.input_ids), special_ids)
    flat = weak_labels(codes, thresholds, lengths, special=special, min_latents=min_latents, window=window)
    return split_flat(flat, lengths)


# --------------------------------------------------------------------------- metrics


def prf1(pred, truth) -> dict[str, float]:
    """Precision, recall and F1 of bool predictions against bool truth (flattened; 0 when undefined)."""
    p = _np(flatten(pred) if isinstance(pred, list) else pred).astype(bool).ravel()
    t = _np(flatten(truth) if isinstance(truth, list) else truth).astype(bool).ravel()
    if p.shape != t.shape:
        raise DataError(f"predictions ({p.size}) and truth ({t.size}) differ in length")
    tp = int((p & t).sum())
    fp = int((p & ~t).sum())
    fn = int((~p & t).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}
