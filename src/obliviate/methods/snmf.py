"""Edit method "snmf": semi-NMF concept features of MLP activations projected out of the MLP weights, as in
Suslik, Shafran, Geva 2026 (EMBER's MLP baseline; read in the paper and its code; semi-NMF of Ding, Li,
Jordan 2010).

An edit method (``kind = "edit"``): ``edit(model, tokenizer, data)`` edits ``model`` in place without the
training loop, and ``method.restore(model)`` puts the weights back bit for bit. The MLP post-activations A
(d_mlp x n tokens) are factorised as ``A ~ F G^T``, F signed and sparse, G >= 0; for each kept concept
feature f (a column of F, mass ratio >= ``min_ratio`` on concept vs neutral tokens) with support S and
``u = f_S / ||f_S||``::

    W_down[:, S] -= delta * (W_down[:, S] u) u^T      # = W_down (I - delta u u^T) on the columns S
    W_up[S, :]   -= delta * u (u^T W_up[S, :])        # = (I - delta u u^T) W_up on the rows S

Details: docs/methods.md, "snmf" under "Method details".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from obliviate.data import text_batches
from obliviate.config import check_ranges
from obliviate.errors import ConfigError, DataError, ObliviateError
from obliviate.unlearning.contract import Method, register
from obliviate.methods.ember.factorize import CODE_CONCEPT, CODE_NEUTRAL, mass_ratio, winner_takes_all
from obliviate.methods.ember.judge import edit_sentences
from obliviate.models.layers import (
    check_layer,
    down_proj_weight_out_in,
    mlp_down_proj,
    mlp_up_proj,
    num_layers,
    states_over_batches,
    up_proj_weight_out_in,
)
from obliviate.train.distributed import check_method

log = logging.getLogger(__name__)

SNMF_EPS = 1e-6
"""The epsilon in the denominator of the multiplicative update."""


# --------------------------------------------------------------------------- factorisation


@dataclass
class SNMFResult:
    """The kept (best) iterate of :func:`snmf_factorize`."""

    F: torch.Tensor
    """(d_mlp, K) sparse signed features, ``ceil(sparsity * d_mlp)`` non-zeros per column."""
    G: torch.Tensor
    """(n, K) non-negative token coefficients."""
    losses: list[float]
    """Relative squared error of every iterate."""
    best_iter: int

    @property
    def loss(self) -> float:
        return self.losses[self.best_iter]


def relative_error(A: torch.Tensor, F: torch.Tensor, G: torch.Tensor) -> float:
    """``||A - F G^T||_F^2 / ||A||_F^2``."""
    return float((A - F @ G.T).pow(2).sum() / A.pow(2).sum())


def snmf_update_G(A: torch.Tensor, F: torch.Tensor, G: torch.Tensor, eps: float = SNMF_EPS) -> torch.Tensor:
    """One multiplicative step ``G * sqrt((P+ + G Q-) / (P- + G Q+ + eps))``, P = A^T F, Q = F^T F."""
    P = A.T @ F  # (n, K)
    Q = F.T @ F  # (K, K)
    Pp, Pm = P.clamp(min=0), (-P).clamp(min=0)
    Qp, Qm = Q.clamp(min=0), (-Q).clamp(min=0)
    return G * torch.sqrt((Pp + G @ Qm) / (Pm + G @ Qp + eps))


def snmf_update_F(A: torch.Tensor, G: torch.Tensor, m: int, ridge: float = 1e-6) -> torch.Tensor:
    """Least squares ``F = A G (G^T G + r I)^-1``, then winner-takes-all (m per column)."""
    K = G.shape[1]
    gram = G.T @ G + ridge * torch.eye(K, dtype=G.dtype, device=G.device)  # (K, K)
    F = torch.linalg.solve(gram, (A @ G).T).T  # (d, K)
    return winner_takes_all(F, m)


def snmf_factorize(A: torch.Tensor, K: int, sparsity: float = 0.01, n_iter: int = 200, seed: int = 42,
                   ridge: float = 1e-6, eps: float = SNMF_EPS) -> SNMFResult:
    """Semi-NMF ``A (d, n) ~ F (d, K) G^T`` with sparse F and G >= 0 (docs/methods.md, "snmf"); deterministic
    per seed."""
    if not isinstance(A, torch.Tensor) or A.dim() != 2:
        raise DataError(f"SNMF: A must be a 2-D tensor (d_mlp x n), got {getattr(A, 'shape', type(A))}")
    d, n = A.shape
    if isinstance(K, bool) or not isinstance(K, int) or not 1 <= K <= n:
        raise ConfigError(f"SNMF: K={K!r} must be an integer in 1..{n} (the number of tokens)")
    if not 0 < sparsity <= 1:
        raise ConfigError(f"SNMF: sparsity={sparsity!r} must be in (0, 1]")
    if isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 1:
        raise ConfigError(f"SNMF: n_iter={n_iter!r} must be a positive integer")
    A = A.detach().float()
    if not torch.isfinite(A).all() or not A.abs().sum() > 0:
        raise DataError("SNMF: the activation matrix is all zeros or contains NaN/inf")
    m = math.ceil(sparsity * d)
    gen = torch.Generator().manual_seed(seed)
    G = torch.rand(n, K, generator=gen).to(A.device)
    best = (math.inf, None, None, -1)
    losses: list[float] = []
    for it in range(n_iter):
        F = snmf_update_F(A, G, m, ridge)
        G = snmf_update_G(A, F, G, eps)
        loss = relative_error(A, F, G)
        if not math.isfinite(loss):
            raise ObliviateError(f"SNMF: non-finite iterate at iteration {it} (seed {seed})")
        losses.append(loss)
        if loss < best[0]:
            best = (loss, F.clone(), G.clone(), it)
    return SNMFResult(F=best[1], G=best[2], losses=losses, best_iter=best[3])


# --------------------------------------------------------------------------- activations and features


@torch.no_grad()
def mlp_activations(model: nn.Module, tokenizer, texts: Sequence[str], layers: Sequence[int],
                    batch_size: int = 16, max_len: int = 128) -> dict[int, torch.Tensor]:
    """MLP post-activations ``{l: (N_tokens, d_mlp)}`` at every non-padding token of ``texts``, in order.

    The forward pass stops after layer ``max(layers)``.
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise DataError("SNMF: no texts to collect activations from")
    return states_over_batches(model, text_batches(tokenizer, texts, batch_size, max_len), layers, mlp=True)


def select_features(G: torch.Tensor, codes: torch.Tensor, min_ratio: float = 2.0,
                    max_features: int | None = None) -> tuple[list[int], torch.Tensor]:
    """``(features with mass ratio >= min_ratio, highest first, at most max_features; ratios (K,))``."""
    ratios = mass_ratio(G, codes)
    order = torch.argsort(ratios, descending=True, stable=True)
    feats = [int(k) for k in order if ratios[k] >= min_ratio]
    return (feats if max_features is None else feats[:max_features]), ratios


@dataclass
class SNMFLayer:
    """What SNMF found at one layer."""

    layer: int
    result: SNMFResult
    ratios: torch.Tensor
    features: list[int]

    def feature_vectors(self) -> list[torch.Tensor]:
        return [self.result.F[:, k] for k in self.features]


@dataclass
class SNMFLocation:
    layers: dict[int, SNMFLayer]
    n_concept_tokens: int
    n_neutral_tokens: int

    def summary(self) -> dict:
        return {
            "n_concept_tokens": self.n_concept_tokens,
            "n_neutral_tokens": self.n_neutral_tokens,
            "layers": {str(l): {"features": s.features, "ratios": [float(s.ratios[k]) for k in s.features],
                                "factor_loss": s.result.loss,
                                "support": [snmf_support(f).tolist() for f in s.feature_vectors()]}
                       for l, s in self.layers.items()},
        }


def snmf_locate(model: nn.Module, tokenizer, concept_sentences: Sequence[str],
                neutral_sentences: Sequence[str],
                layers: Sequence[int], K: int = 32, *, sparsity: float = 0.01, n_iter: int = 200,
                seed: int = 42,
                min_ratio: float = 2.0, max_features: int | None = 3) -> SNMFLocation:
    """Factorise the MLP activations of concept + neutral tokens at each layer and keep concept features."""

    layers = sorted({check_layer(model, int(l)) for l in layers})
    if not layers:
        raise ConfigError("SNMF: no layers given")
    conc = mlp_activations(model, tokenizer, concept_sentences, layers)
    neut = mlp_activations(model, tokenizer, neutral_sentences, layers)
    n_c, n_n = len(conc[layers[0]]), len(neut[layers[0]])
    codes = torch.tensor([CODE_CONCEPT] * n_c + [CODE_NEUTRAL] * n_n)
    found = {}
    for l in layers:
        A = torch.cat([conc[l], neut[l]]).T  # (d_mlp, n)
        res = snmf_factorize(A, min(K, A.shape[1]), sparsity=sparsity, n_iter=n_iter, seed=seed)
        feats, ratios = select_features(res.G, codes, min_ratio, max_features)
        found[l] = SNMFLayer(l, res, ratios, feats)
    return SNMFLocation(found, n_c, n_n)


# --------------------------------------------------------------------------- edit, snapshot, restore


def snmf_support(f: torch.Tensor) -> torch.Tensor:
    """Indices S of the non-zero entries of feature ``f`` (d_mlp,)."""
    return torch.nonzero(f).flatten()


@torch.no_grad()
def edit_mlp_feature(model: nn.Module, layer: int, f: torch.Tensor, delta: float,
                     edit_up: bool = True) -> list[int]:
    """Project feature ``f`` out of layer ``layer``'s MLP with strength delta (module docstring); returns
    S."""

    if not math.isfinite(float(delta)):
        raise ConfigError(f"SNMF: delta={delta!r} must be a finite number")
    W = down_proj_weight_out_in(model, layer)  # (d_model, d_mlp) view
    f = torch.as_tensor(f).flatten()
    if f.shape != (W.shape[1],):
        raise DataError(f"SNMF: feature has shape {tuple(f.shape)}, expected ({W.shape[1]},) (d_mlp)")
    S = snmf_support(f)
    if S.numel() == 0:
        return []
    u = f[S].float()
    u = (u / u.norm()).to(W.device)  # (|S|,)
    S_dev = S.to(W.device)
    cols = W[:, S_dev].float()  # (d_model, |S|)
    W[:, S_dev] = (cols - float(delta) * (cols @ u)[:, None] * u[None, :]).to(W.dtype)
    if edit_up:
        U = up_proj_weight_out_in(model, layer)  # (d_mlp, d_model) view
        rows = U[S_dev, :].float()  # (|S|, d_model)
        U[S_dev, :] = (rows - float(delta) * u[:, None] * (u @ rows)[None, :]).to(U.dtype)
    return S.tolist()


@dataclass
class MLPSnapshot:
    """Copies of the down- and up-projection weights (as stored) of some layers."""

    weights: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)


def _proj(model, layer: int, which: str):
    return (mlp_down_proj if which == "down" else mlp_up_proj)(model, layer)


def snapshot_mlp(model: nn.Module, layers: Sequence[int]) -> MLPSnapshot:
    """Clone the down/up-projection weights of ``layers`` (for :func:`restore_mlp`)."""
    return MLPSnapshot({(int(l), w): _proj(model, int(l), w).weight.detach().clone()
                        for l in layers for w in ("down", "up")})


@torch.no_grad()
def restore_mlp(model: nn.Module, snapshot: MLPSnapshot) -> None:
    """Copy the snapshot back in place, bit for bit (the Parameters stay the same objects)."""
    for (l, w), t in snapshot.weights.items():
        _proj(model, l, w).weight.copy_(t)


@dataclass
class SNMFEditRecord:
    delta: float
    supports: dict[int, list[list[int]]]
    """Per layer, the support S of each edited feature."""

    @property
    def n_features(self) -> int:
        return sum(len(v) for v in self.supports.values())


def apply_snmf(model: nn.Module, location: SNMFLocation, delta: float,
               edit_up: bool = True) -> SNMFEditRecord:
    """Edit every kept feature of ``location`` out of the model, in place."""
    supports = {l: [edit_mlp_feature(model, l, f, delta, edit_up) for f in s.feature_vectors()]
                for l, s in location.layers.items()}
    if not any(supports.values()):
        log.warning("SNMF: no feature passed the ratio threshold; nothing edited")
    return SNMFEditRecord(float(delta), supports)


# --------------------------------------------------------------------------- the method


@dataclass
class SNMFEditConfig:
    delta: float = 1.0
    """Edit strength: 1 projects the feature out exactly."""
    layers: list[int] | None = None
    """MLP layers to factorise and edit; None = the middle layer."""
    K: int = 32
    """Features per layer (capped at the number of tokens)."""
    sparsity: float = 0.01
    """Winner-takes-all: ceil(sparsity * d_mlp) non-zeros per feature."""
    n_iter: int = 200
    min_ratio: float = 2.0
    max_features: int = 3
    """At most this many features edited per layer."""
    edit_up: bool = True
    """Also edit the rows S of the up-projection."""
    seed: int = 42

    def __post_init__(self):
        if self.K < 1 or self.n_iter < 1 or self.max_features < 1:
            raise ConfigError("config keys 'K', 'n_iter', 'max_features': must be >= 1")
        if self.layers is not None and not self.layers:
            raise ConfigError("config key 'layers': needs at least one layer (or null for the middle one)")
        check_ranges(self, fraction=("sparsity",), nonnegative=("min_ratio",), indices=("layers",))
        if self.sparsity == 0:
            raise ConfigError("config key 'sparsity': must be in (0, 1], got 0 (no non-zero per feature)")


@register("snmf", paper="semi-NMF of MLP activations, as in Suslik, Shafran, Geva 2026 (EMBER)",
          equation="project the semi-NMF concept features of MLP activations out of W_down (and W_up)",
          trains="MLP weights of the located layers")
class SNMFEdit(Method):
    """SNMF: semi-NMF concept features of MLP activations, projected out of W_down / W_up."""

    kind = "edit"
    config_cls = SNMFEditConfig
    needs_reference = False

    def __init__(self, cfg: SNMFEditConfig):
        super().__init__(cfg)
        self.snapshot = None
        self.location = None
        self.record = None

    def check(self, model) -> None:
        for l in self.cfg.layers or []:
            check_layer(model, int(l))

    def edit(self, model, tokenizer, data) -> dict:
        check_method(self)
        concept, neutral = edit_sentences(data)
        layers = self.cfg.layers if self.cfg.layers is not None else [num_layers(model) // 2]
        self.location = snmf_locate(model, tokenizer, concept, neutral, layers, self.cfg.K,
                                    sparsity=self.cfg.sparsity, n_iter=self.cfg.n_iter, seed=self.cfg.seed,
                                    min_ratio=self.cfg.min_ratio, max_features=self.cfg.max_features)
        self.snapshot = snapshot_mlp(model, list(self.location.layers))
        self.record = apply_snmf(model, self.location, self.cfg.delta, self.cfg.edit_up)
        return {"method": "snmf", "delta": self.record.delta, "n_features": self.record.n_features,
                **self.location.summary()}

    def restore(self, model) -> None:
        if self.snapshot is not None:
            restore_mlp(model, self.snapshot)
