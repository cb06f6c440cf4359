"""EMBER step 1: the token vocabulary V' and a sparse factorisation of its embeddings.

Suslik, Shafran, Geva (2026), "Don't Forget Your Embeddings" (read in the paper and its code). V' = the
concept and neutral sentences' token ids minus special tokens, coded 1 (concept only), 0 (neutral
only), 2 (both). Stopping rule, defaults and retries: docs/methods.md#machinery-shared-by-several-methods.

With ``A = E[V']^T`` (d x n), find ``A ~ F G^T``, F (d x K) dense, G (n x K) signed and sparse. From
``G ~ N(0, 1)``, repeat::

    F = A G (G^T G + r I)^-1                      # ridge least squares for F
    s_k = ||G[:, k]||;  G[:, k] /= s_k;  F[:, k] *= s_k   # F G^T unchanged
    G = A^T F (F^T F + r I)^-1                    # ridge least squares for G
    G[:, k] = WTA_m(G[:, k])                      # keep the m = ceil(sparsity * n) largest |G_tk|

scoring each iterate by ``||A - F G^T||_F^2 / ||A||_F^2`` and keeping the best. Candidates for the
judge: ``ratio_k = mean_{t: code 1} |G_tk| / (mean_{t: code 0} |G_tk| + 1e-8) >= 2``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from obliviate.errors import ConfigError, DataError, ObliviateError

log = logging.getLogger(__name__)

CODE_NEUTRAL, CODE_CONCEPT, CODE_BOTH = 0, 1, 2
"""Token codes of :func:`build_vocab`."""

RATIO_EPS = 1e-8


# --------------------------------------------------------------------------- vocabulary


def _sentence_ids(tokenizer, sentences: Sequence[str]) -> set[int]:
    if isinstance(sentences, str):
        sentences = [sentences]
    ids: set[int] = set()
    if len(sentences) == 0:
        return ids
    enc = tokenizer(list(sentences), add_special_tokens=False)
    for row in enc["input_ids"]:
        ids.update(int(t) for t in row)
    return ids


def build_vocab(tokenizer, concept_sentences: Sequence[str], neutral_sentences: Sequence[str]):
    """V' and its codes: ``(token_ids (|V'|,) long, codes (|V'|,) long)``, sorted by token id.

    Sentences are tokenised without added special tokens, and any special token that
    still appears (e.g. written literally in the text) is dropped. Codes: 1 = only in
    concept sentences, 0 = only in neutral sentences, 2 = in both.
    """
    special = {int(t) for t in (getattr(tokenizer, "all_special_ids", None) or [])}
    concept = _sentence_ids(tokenizer, concept_sentences) - special
    neutral = _sentence_ids(tokenizer, neutral_sentences) - special
    if not concept:
        raise DataError("EMBER: the concept sentences give no (non-special) tokens")
    vocab = sorted(concept | neutral)
    codes = [CODE_BOTH if t in concept and t in neutral else CODE_CONCEPT if t in concept else CODE_NEUTRAL
             for t in vocab]
    return torch.tensor(vocab, dtype=torch.long), torch.tensor(codes, dtype=torch.long)


# --------------------------------------------------------------------------- factorisation


@dataclass
class FactorResult:
    """The kept (best) iterate of :func:`sparse_factorize` and its history."""

    F: torch.Tensor
    """(d, K) dense features."""
    G: torch.Tensor
    """(n, K) signed coefficients, ``ceil(sparsity * n)`` non-zeros per column."""
    loss_history: list[float]
    """After each iteration of the successful attempt, the loss of the kept (best-so-far) iterate; never
    increases."""
    best_iter: int
    """0-based iteration of the kept iterate."""
    n_iter: int
    """Iterations run in the successful attempt."""
    raw_losses: list[float] = field(default_factory=list)
    """Loss of every iterate (not only kept ones) of the successful attempt."""
    seed: int = 42
    """Seed of the successful attempt (``seed + attempt``)."""
    attempts: int = 1
    """Number of attempts, 1 when the first one succeeded."""

    @property
    def loss(self) -> float:
        """Relative squared error ``||A - F G^T||^2 / ||A||^2`` of the kept iterate."""
        return self.loss_history[self.best_iter]


class _FactorFailure(Exception):
    """Numerical failure inside one attempt (non-finite values, failed solve)."""


def _init_G(n: int, K: int, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Initial G ~ N(0, 1) from a generator seeded with ``seed`` (on CPU, so every device agrees)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, K, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)


def _ridge_solve(X: torch.Tensor, AX: torch.Tensor, ridge: float) -> torch.Tensor:
    """``AX (X^T X + r I)^-1`` via a linear solve (the Gram matrix is symmetric)."""
    K = X.shape[1]
    gram = X.T @ X + ridge * torch.eye(K, dtype=X.dtype, device=X.device)  # (K, K)
    try:
        return torch.linalg.solve(gram, AX.T).T
    except RuntimeError as e:  # torch.linalg.LinAlgError is a RuntimeError
        raise _FactorFailure(f"ridge solve failed: {e}") from e


def winner_takes_all(G: torch.Tensor, m: int) -> torch.Tensor:
    """Keep the ``m`` largest-magnitude entries of each column of G, zero the rest."""
    idx = G.abs().topk(m, dim=0).indices  # (m, K)
    mask = torch.zeros_like(G, dtype=torch.bool).scatter_(0, idx, True)
    return G * mask


def _attempt(A, K, m, ridge, patience, tol, max_iter, seed):
    d, n = A.shape
    a_norm2 = A.pow(2).sum()
    G = _init_G(n, K, seed, A.dtype, A.device)
    best = (math.inf, None, None, -1)  # (loss, F, G, iteration)
    kept: list[float] = []
    raw: list[float] = []
    since = 0
    it = -1
    for it in range(max_iter):
        F = _ridge_solve(G, A @ G, ridge)  # (d, K)
        norms = G.norm(dim=0)
        norms = torch.where(norms > 0, norms, torch.ones_like(norms))
        G = G / norms
        F = F * norms
        G = _ridge_solve(F, A.T @ F, ridge)  # (n, K)
        G = winner_takes_all(G, m)
        loss = float((A - F @ G.T).pow(2).sum() / a_norm2)
        if not math.isfinite(loss) or not (torch.isfinite(F).all() and torch.isfinite(G).all()):
            raise _FactorFailure(f"non-finite iterate at iteration {it}")
        raw.append(loss)
        improved_enough = best[0] - loss > tol
        if loss < best[0]:
            best = (loss, F.clone(), G.clone(), it)
        kept.append(best[0])
        since = 0 if improved_enough else since + 1
        if since >= patience:
            break
    return best, kept, raw, it + 1


def sparse_factorize(
    A: torch.Tensor,
    K: int,
    sparsity: float = 0.01,
    ridge: float = 1e-4,
    patience: int = 500,
    tol: float = 1e-4,
    max_iter: int = 20000,
    seed: int = 42,
    retries: int = 10,
    dtype: torch.dtype = torch.float32,
) -> FactorResult:
    """Factorise ``A (d, n) ~ F (d, K) G^T (K, n)`` with winner-takes-all sparse G (module docstring).

    Runs on ``A``'s device in ``dtype``. A failed attempt (non-finite values, failed
    solve) is retried with seed ``seed + attempt``, up to ``retries`` more times; then
    :class:`ObliviateError`. Deterministic for a given seed, device and dtype.
    """
    if not isinstance(A, torch.Tensor) or A.dim() != 2:
        raise DataError(f"EMBER: A must be a 2-D tensor (d x n), got {getattr(A, 'shape', type(A))}")
    d, n = A.shape
    if isinstance(K, bool) or not isinstance(K, int) or not 1 <= K <= n:
        raise ConfigError(f"EMBER: K={K!r} must be an integer in 1..{n} (the number of tokens)")
    if not 0 < sparsity <= 1:
        raise ConfigError(f"EMBER: sparsity={sparsity!r} must be in (0, 1]")
    for name, v in (("patience", patience), ("max_iter", max_iter)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"EMBER: {name}={v!r} must be a positive integer")
    if ridge < 0 or tol < 0 or retries < 0:
        raise ConfigError(f"EMBER: ridge={ridge}, tol={tol}, retries={retries} must be >= 0")
    A = A.detach().to(dtype)
    if not torch.isfinite(A).all():
        raise DataError("EMBER: the embedding matrix A contains NaN or inf")
    if not A.abs().sum() > 0:
        raise DataError("EMBER: the embedding matrix A is all zeros")
    m = math.ceil(sparsity * n)
    errors = []
    for attempt in range(retries + 1):
        s = seed + attempt
        try:
            (loss, F, G, best_it), kept, raw, n_iter = _attempt(A, K, m, ridge, patience, tol, max_iter, s)
        except _FactorFailure as e:
            log.warning("EMBER factorisation attempt %d (seed %d) failed: %s", attempt + 1, s, e)
            errors.append(str(e))
            continue
        return FactorResult(F=F, G=G, loss_history=kept, best_iter=best_it, n_iter=n_iter,
                            raw_losses=raw, seed=s, attempts=attempt + 1)
    raise ObliviateError(
        f"EMBER factorisation failed in all {retries + 1} attempts "
        f"(seeds {seed}..{seed + retries}); last: {errors[-1]}"
    )


# --------------------------------------------------------------------------- feature selection


def check_codes(G: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """``codes`` as a tensor on G's device; DataError unless there is one code per row of G."""
    codes = torch.as_tensor(codes, device=G.device)
    if codes.shape != (G.shape[0],):
        raise DataError(f"EMBER: codes has shape {tuple(codes.shape)}, "
                        f"expected ({G.shape[0]},) (one per row of G)")
    return codes


def mass_ratio(G: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Per feature k: ``mean_{code 1}|G_tk| / (mean_{code 0}|G_tk| + 1e-8)``, shape (K,).

    Means run over *all* tokens of that code (zeros included); code-2 tokens are
    ignored. DataError if there are no code-1 or no code-0 tokens.
    """
    codes = check_codes(G, codes)
    absG = G.abs().float()
    concept, neutral = codes == CODE_CONCEPT, codes == CODE_NEUTRAL
    if not concept.any():
        raise DataError("EMBER: no concept-only (code 1) tokens; the mass ratio is undefined")
    if not neutral.any():
        raise DataError("EMBER: no neutral-only (code 0) tokens; the mass ratio is undefined")
    return absG[concept].mean(0) / (absG[neutral].mean(0) + RATIO_EPS)


def candidate_features(G: torch.Tensor, codes: torch.Tensor, min_ratio: float = 2.0) -> list[int]:
    """Features with ``mass_ratio >= min_ratio``, highest ratio first."""
    ratio = mass_ratio(G, codes)
    order = torch.argsort(ratio, descending=True, stable=True)
    return [int(k) for k in order if ratio[k] >= min_ratio]


def top_token_ids(G: torch.Tensor, token_ids: torch.Tensor, feature: int, n: int = 20) -> list[int]:
    """The (up to) ``n`` token ids with the largest ``|G_tk|`` on ``feature``, largest first; zeros left
    out."""
    col = G[:, feature].abs()
    n = min(n, int((col > 0).sum()))
    idx = col.topk(n).indices.tolist() if n > 0 else []
    return [int(token_ids[i]) for i in idx]
