"""CRISP: persistent concept unlearning with sparse-autoencoder features (docs/methods.md, [paper/code]).

The MLP partner of EMBER (Ashuach et al. 2025). Components, as functions:

Feature selection
-----------------
An SAE at decoder layer l encodes the residual stream (output of layer l) of the
*frozen* model. A feature *fires* on a token when its SAE code is > 0. With
``t_j`` = number of target (concept) tokens on which feature j fires and ``b_j`` the
same on benign tokens::

    score_j = t_j - b_j;   ratio_j = t_j / b_j  (inf when b_j = 0 < t_j)

features with ``t_j > 0`` and ``ratio_j >= min_ratio`` (3) are kept, highest score
first (ties: lower index), at most ``top_k`` per layer (:func:`rank_features`).

Losses (one training step)
--------------------------
    L_unlearn = mean over target tokens (padding excluded) and selected features j of ReLU(pre_j(h_l))
    L_reg     = mean over benign tokens and dims of (h_l(theta) - h_l(frozen))^2       (at each SAE layer)
    L_coh     = the same MSE at the last decoder layer, on coherence prompts
    L         = (1 - beta) L_unlearn + beta L_reg + beta gamma L_coh,   beta = 0.99, gamma = 0.01

``pre_j`` is the SAE's ReLU pre-activation; we take it instead of the TopK code so a
feature that has dropped out of the top k still gets pushed down (with the TopK code the
gradient would vanish as soon as it leaves the top k, while the feature may still be
active). With several SAE layers L_unlearn and L_reg are averaged over them.

SAE
---
No maintained SAE library that trains on Hugging Face models on a CPU is installed here
(eai-sparsify / sae-lens are not), so we reuse the small TopK SAE of
:mod:`obliviate.filtering.sae` (``TopKSAE``, ``train_sae``), trained on the frozen
model's residual stream at layer l over the target and benign texts. The paper used
pretrained JumpReLU SAEs (Gemma Scope / Llama Scope); ours is a reconstruction at tiny scale.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import torch

from obliviate.errors import ConfigError, DataError
from obliviate.losses import hidden_mse, masked_mean

BETA = 0.99
GAMMA = 0.01
MIN_RATIO = 3.0

log = logging.getLogger(__name__)


def firing_counts(codes: torch.Tensor) -> torch.Tensor:
    """Per feature, the number of rows (tokens) with a code > 0: ``(N, m) -> (m,)`` long."""
    if codes.dim() != 2:
        raise DataError(f"CRISP: codes must be (N_tokens, n_latents), got shape {tuple(codes.shape)}")
    return (codes > 0).sum(0)


def feature_scores(target_counts: torch.Tensor, benign_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(score = t - b, ratio = t / b)`` per feature; ratio is inf where b = 0 < t and 0 where t = 0."""
    t, b = target_counts.double(), benign_counts.double()
    if t.shape != b.shape:
        raise DataError(f"CRISP: target counts {tuple(t.shape)} and benign counts {tuple(b.shape)} differ")
    ratio = torch.where(b > 0, t / b.clamp(min=1), torch.where(t > 0, math.inf, 0.0))
    return t - b, ratio


def rank_features(target_counts: torch.Tensor, benign_counts: torch.Tensor, min_ratio: float = MIN_RATIO,
                  top_k: int | None = 10) -> list[int]:
    """Features with ``t > 0`` and ``t / b >= min_ratio``, by score ``t - b`` (highest first), at most ``top_k``."""
    if top_k is not None and top_k < 1:
        raise ConfigError(f"CRISP: top_k={top_k!r} must be >= 1")
    score, ratio = feature_scores(target_counts, benign_counts)
    ok = (target_counts > 0) & (ratio >= min_ratio)
    order = sorted((int(j) for j in torch.nonzero(ok).flatten()), key=lambda j: (-float(score[j]), j))
    return order if top_k is None else order[:top_k]


def select_sae_features(sae, target_acts: torch.Tensor, benign_acts: torch.Tensor, min_ratio: float = MIN_RATIO,
                        top_k: int | None = 10) -> tuple[list[int], dict]:
    """Encode target and benign activations (N, d) with ``sae`` and rank its features; returns (features, info)."""
    zt, zb = sae.encode_all(target_acts), sae.encode_all(benign_acts)
    t, b = firing_counts(zt), firing_counts(zb)
    feats = rank_features(t, b, min_ratio, top_k)
    return feats, {"target_fires": [int(t[j]) for j in feats], "benign_fires": [int(b[j]) for j in feats],
                   "n_target_tokens": len(zt), "n_benign_tokens": len(zb)}


def train_layer_sae(acts: torch.Tensor, n_latents: int, k: int, steps: int, lr: float = 1e-3, seed: int = 0):
    """A :class:`~obliviate.filtering.sae.TopKSAE` trained on ``acts`` (N, d) with the one training loop; frozen."""
    from obliviate.filtering.sae import train_sae

    sae, info = train_sae(acts, n_latents, k, steps=steps, lr=lr, seed=seed, batch_size=min(256, len(acts)))
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae, info


def fit_layer_saes(target: dict[int, torch.Tensor], benign: dict[int, torch.Tensor], layers: Sequence[int],
                   n_latents: int | None, k: int, steps: int, lr: float, seed: int, min_ratio: float = MIN_RATIO,
                   top_k: int | None = None) -> tuple[dict, dict, dict]:
    """One SAE per layer on target + benign activations ``{l: (N, d)}`` (``n_latents`` None: 4 d), then its
    features (:func:`select_sae_features`): ``(saes, features, info)``, each keyed by layer."""
    saes, features, info = {}, {}, {}
    for l in layers:
        acts = torch.cat([target[l], benign[l]])
        m = n_latents or 4 * acts.shape[1]
        sae, sae_info = train_layer_sae(acts, m, min(k, m), steps, lr, seed + l)
        feats, layer_info = select_sae_features(sae, target[l], benign[l], min_ratio, top_k)
        if not feats:
            log.warning("CRISP: no SAE feature at layer %d fires >= %.3g x more on target than benign text",
                        l, min_ratio)
        saes[l], features[l] = sae, feats
        info[l] = {**layer_info, "features": feats, "sae_fvu": sae_info["fvu"]}
    return saes, features, info


def unlearn_term(sae, h: torch.Tensor, mask: torch.Tensor | None, features: Sequence[int]) -> torch.Tensor:
    """L_unlearn at one layer: mean over valid tokens and ``features`` of ReLU(pre-activation); h (B, T, d)."""
    if len(features) == 0:
        return h.sum() * 0.0  # keeps the graph; no feature, nothing to push
    idx = torch.as_tensor(list(features), dtype=torch.long, device=h.device)
    pre = sae.pre_activations(h.to(sae.W_enc.dtype))[..., idx]  # (B, T, |S|)
    act = torch.relu(pre).mean(-1)  # (B, T)
    return act.mean() if mask is None else masked_mean(act, mask.bool())


def reg_term(h: torch.Tensor, h_ref: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """L_reg / L_coh: hidden-state MSE to the frozen model over valid tokens."""
    return hidden_mse(h, h_ref, mask)


def crisp_terms(l_unlearn: torch.Tensor, l_reg: torch.Tensor, l_coh: torch.Tensor, beta: float = BETA,
                gamma: float = GAMMA) -> dict[str, torch.Tensor]:
    """Weighted terms ``{unlearn: (1-beta) Lu, reg: beta Lr, coh: beta gamma Lc}`` (they sum to the CRISP loss)."""
    return {"unlearn": (1.0 - beta) * l_unlearn, "reg": beta * l_reg, "coh": beta * gamma * l_coh}
