"""EMBER vocabulary, sparse factorisation and mass ratio."""

import math

import pytest
import torch

import obliviate.methods.ember.factorize as fz
from obliviate.methods.ember.factorize import (
    build_vocab,
    candidate_features,
    mass_ratio,
    sparse_factorize,
    top_token_ids,
    winner_takes_all,
)
from obliviate.errors import ConfigError, DataError, ObliviateError


class WordTokenizer:
    """Whitespace tokenizer with a fixed vocabulary; ids 0 and 1 are special."""

    all_special_ids = [0, 1]

    def __init__(self):
        self.vocab = {"<pad>": 0, "<bos>": 1}

    def __call__(self, texts, add_special_tokens=True):
        ids = []
        for text in texts:
            row = [1] if add_special_tokens else []
            for w in text.split():
                row.append(self.vocab.setdefault(w, len(self.vocab)))
            ids.append(row)
        return {"input_ids": ids}


def random_A(d=16, n=500, seed=0):
    return torch.randn(d, n, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- vocabulary


def test_build_vocab_codes_and_special_tokens():
    tok = WordTokenizer()
    # ids: hogwarts=2 wand=3 the=4 cat=5 sat=6 (assigned in order of first appearance)
    concept = ["hogwarts wand the", "<bos> wand"]
    neutral = ["the cat", "sat <pad>"]
    ids, codes = build_vocab(tok, concept, neutral)
    assert ids.tolist() == [2, 3, 4, 5, 6]  # <pad>, <bos> dropped although written in the text
    assert codes.tolist() == [1, 1, 2, 0, 0]
    assert ids.dtype == codes.dtype == torch.long


def test_build_vocab_needs_concept_tokens():
    with pytest.raises(DataError):
        build_vocab(WordTokenizer(), ["<bos>"], ["the cat"])


# --------------------------------------------------------------------------- factorisation


def test_winner_takes_all_hand_example():
    G = torch.tensor([[1.0, -5.0], [-3.0, 2.0], [2.0, 1.0]])
    assert winner_takes_all(G, 2).tolist() == [[0.0, -5.0], [-3.0, 2.0], [2.0, 0.0]]


def test_each_column_keeps_ceil_one_percent():
    r = sparse_factorize(random_A(n=500), K=6, patience=20, max_iter=200)
    assert r.G.shape == (500, 6) and r.F.shape == (16, 6)
    assert (r.G != 0).sum(dim=0).tolist() == [5] * 6  # ceil(0.01 * 500)
    r = sparse_factorize(random_A(n=450), K=3, sparsity=0.01, patience=5, max_iter=20)
    assert (r.G != 0).sum(dim=0).tolist() == [5] * 3  # ceil(4.5) = 5


def test_kept_loss_never_increases_and_matches_returned_factors():
    A = random_A(n=300)
    r = sparse_factorize(A, K=5, sparsity=0.02, patience=30, max_iter=300)
    h = r.loss_history
    assert len(h) == len(r.raw_losses) == r.n_iter
    assert all(b <= a for a, b in zip(h, h[1:]))
    assert h[-1] == min(r.raw_losses) == r.raw_losses[r.best_iter] == r.loss
    recomputed = float((A - r.F @ r.G.T).pow(2).sum() / A.pow(2).sum())
    assert recomputed == pytest.approx(r.loss, rel=1e-4)
    assert 0 < r.loss < 1  # better than the zero factorisation on random data
    assert max(r.raw_losses) > r.loss  # the history is not trivially flat


def test_same_seed_identical_different_seed_differs():
    A = random_A(n=200)
    kw = dict(K=4, sparsity=0.05, patience=10, max_iter=100)
    a, b = sparse_factorize(A, seed=7, **kw), sparse_factorize(A, seed=7, **kw)
    c = sparse_factorize(A, seed=8, **kw)
    assert torch.equal(a.F, b.F) and torch.equal(a.G, b.G)
    assert not torch.equal(a.G, c.G)


def test_recovers_planted_sparse_structure():
    d, n, K, m = 32, 300, 10, 30  # sparsity 0.1 -> 30 tokens per feature, disjoint supports covering all tokens
    g = torch.Generator().manual_seed(0)
    F0 = torch.randn(d, K, generator=g)
    G0 = torch.zeros(n, K)
    perm = torch.randperm(n, generator=g)
    for k in range(K):
        G0[perm[k * m:(k + 1) * m], k] = torch.rand(m, generator=g) + 0.5
    A = F0 @ G0.T
    A = A + 0.01 * torch.randn(A.shape, generator=g)
    r = sparse_factorize(A, K, sparsity=0.1, patience=50, max_iter=1000)
    assert r.loss < 1e-3
    planted = {frozenset(torch.nonzero(G0[:, k]).flatten().tolist()) for k in range(K)}
    found = {frozenset(torch.nonzero(r.G[:, k]).flatten().tolist()) for k in range(K)}
    assert planted == found


def test_stops_after_patience_and_at_max_iter():
    A = random_A(n=200)
    # tol larger than any possible improvement: only the first iterate counts as one
    r = sparse_factorize(A, K=3, sparsity=0.05, patience=4, tol=10.0, max_iter=1000)
    assert r.n_iter == 1 + 4
    r = sparse_factorize(A, K=3, sparsity=0.05, patience=10**6, max_iter=7)
    assert r.n_iter == 7


def test_retry_after_nan_uses_next_seed(monkeypatch):
    A = random_A(n=200)
    kw = dict(K=4, sparsity=0.05, patience=10, max_iter=100)
    reference = sparse_factorize(A, seed=43, **kw)
    calls = []
    real_init = fz._init_G

    def nan_first(n, K, seed, dtype, device):
        calls.append(seed)
        G = real_init(n, K, seed, dtype, device)
        return torch.full_like(G, float("nan")) if len(calls) == 1 else G

    monkeypatch.setattr(fz, "_init_G", nan_first)
    r = sparse_factorize(A, seed=42, **kw)
    assert calls == [42, 43]
    assert r.attempts == 2 and r.seed == 43
    assert torch.equal(r.G, reference.G) and torch.equal(r.F, reference.F)


def test_retry_after_singular_solve(monkeypatch):
    real_solve = torch.linalg.solve
    n_calls = [0]

    def failing_once(*args, **kwargs):
        n_calls[0] += 1
        if n_calls[0] == 1:
            raise torch.linalg.LinAlgError("singular")
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(torch.linalg, "solve", failing_once)
    r = sparse_factorize(random_A(n=200), K=4, sparsity=0.05, patience=5, max_iter=50)
    assert r.attempts == 2 and r.seed == 43 and math.isfinite(r.loss)


def test_gives_up_after_retries(monkeypatch):
    calls = []

    def always_nan(n, K, seed, dtype, device):
        calls.append(seed)
        return torch.full((n, K), float("nan"), dtype=dtype)

    monkeypatch.setattr(fz, "_init_G", always_nan)
    with pytest.raises(ObliviateError, match="all 3 attempts"):
        sparse_factorize(random_A(n=200), K=4, sparsity=0.05, retries=2, max_iter=10)
    assert calls == [42, 43, 44]


def test_bad_arguments():
    A = random_A(n=50)
    with pytest.raises(ConfigError):
        sparse_factorize(A, K=0)
    with pytest.raises(ConfigError):
        sparse_factorize(A, K=51)
    with pytest.raises(ConfigError):
        sparse_factorize(A, K=2, sparsity=0)
    bad = A.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(DataError):
        sparse_factorize(bad, K=2)


# --------------------------------------------------------------------------- mass ratio


def test_mass_ratio_hand_example():
    G = torch.tensor([
        [2.0, 1.0],   # code 1
        [-4.0, -1.0],  # code 1
        [1.0, -3.0],  # code 0
        [1.0, 1.0],   # code 0
        [50.0, 50.0],  # code 2: ignored
    ])
    codes = torch.tensor([1, 1, 0, 0, 2])
    # feature 0: mean(2, 4) / (mean(1, 1) + 1e-8) = 3;  feature 1: mean(1, 1) / mean(3, 1) = 0.5
    ratio = mass_ratio(G, codes)
    assert ratio.tolist() == pytest.approx([3.0, 0.5], rel=1e-6)
    assert candidate_features(G, codes, min_ratio=2.0) == [0]
    assert candidate_features(G, codes, min_ratio=0.4) == [0, 1]  # highest ratio first


def test_mass_ratio_zero_neutral_mass_uses_epsilon():
    G = torch.tensor([[1.0], [0.0]])
    assert mass_ratio(G, torch.tensor([1, 0])).item() == pytest.approx(1.0 / 1e-8, rel=1e-5)


def test_mass_ratio_needs_both_codes():
    with pytest.raises(DataError):
        mass_ratio(torch.ones(2, 1), torch.tensor([1, 2]))
    with pytest.raises(DataError):
        mass_ratio(torch.ones(2, 1), torch.tensor([1, 1, 0]))


def test_top_token_ids_by_magnitude_skipping_zeros():
    G = torch.tensor([[0.5], [-3.0], [0.0], [2.0]])
    assert top_token_ids(G, torch.tensor([10, 11, 12, 13]), 0, n=20) == [11, 13, 10]
    assert top_token_ids(G, torch.tensor([10, 11, 12, 13]), 0, n=2) == [11, 13]
