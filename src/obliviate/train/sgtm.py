"""Selective Gradient Masking (SGTM) and label noise for pretraining on labelled tokens.

SGTM (Shilov, Cloud et al., arXiv 2512.05648, "Beyond data filtering"; an improved gradient routing, Cloud
et al. 2410.04332) dedicates, in every decoder layer, a few attention heads and MLP hidden units to the forget
data. Its training signal is split by label: with :math:`M` the 0/1 mask of the dedicated parameter entries,

.. math::

    g = \\nabla_\\theta \\mathcal{L}_{\\text{other}}(\\theta)
        + M \\odot \\nabla_\\theta \\mathcal{L}_{\\text{forget}}(\\theta),

so the loss on forget-labelled tokens updates the dedicated entries only; after pretraining they are ablated
(set to zero: :func:`ablate`). On a share of the steps (:attr:`SGTMConfig.retain_share`) the other tokens'
loss is computed with the dedicated entries switched off, :math:`\\mathcal{L}_{\\text{other}}((1-M) \\odot
\\theta)`, so the shared parameters learn to do without them (the paper's "retain" batches).

Checked against the paper's public code (``safety-research/selective-gradient-masking``, its
``parameter_masking`` strategy, the one the paper calls SGTM):

* dedicated parameters (:func:`dedicated_masks`): the last ``heads`` attention heads (their query, key and
  value rows and their columns of the output projection) and the last ``mlp_units`` MLP hidden units (their
  up and gate rows and their columns of the down projection), in every layer; the public TinyStories and
  Wikipedia scripts dedicate 1 head of 32 and 64 units of 2048 (about 3%). The world's models have 4 heads,
  so one head is the least there is (25% of attention); :attr:`SGTMConfig.mlp_units` defaults to 64 of 352
  (18%), near the forget split's share of the world's facts (a *reconstruction* of the share for this
  scale: the paper's 3% is of models with 32 heads).
* forget-labelled data updates the dedicated entries only: the code zeroes the other entries' gradients in
  the masked blocks after the backward pass, and (``--mask-embeddings``, on in its Wikipedia runs) the
  embeddings'. Here every non-dedicated parameter is held fixed for it, the norms' gains too (the code
  leaves those trainable): a *reconstruction*, so that ablation removes everything forget tokens wrote.
* other data updates every parameter (the code's "default" batches), on a share of steps with the
  dedicated parts switched off (its "retain" batches, ``--retain-retain-perc 25`` in the label-noise
  runs: :attr:`SGTMConfig.retain_share` defaults to 0.25).
* the code masks per *batch* (each step draws its batch from one split); the world's documents mix facts of
  every split, so here the masking is per *token*: a *reconstruction* with two forwards per step, one with
  the dedicated-only parameters for the forget-labelled targets (:func:`forget_params`), one for the rest.
* after training the code ablates by zeroing (``not_trainable_ablate``); its logit-bias calibration after
  ablation is not reproduced (the world's models have no output bias).

Label noise (:func:`flip_runs`, :func:`flipped`): the paper's noise is its labeller's recall below 1, a share
of forget *documents* left unlabelled. A world document mixes facts of every split, so here the unit is a
labelled *run*: a maximal run of consecutive tokens whose ground-truth split is labelled (one segment naming a
fact), and, in the QA term, one question-answer pair. A seeded share of them, exactly ``round(share * n)``,
becomes unlabelled: trained on as ordinary data by filtering and SGTM alike. The runs flipped at a share are
the first of one seeded order, so at one seed the runs flipped at 10% are among those flipped at 30%.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from obliviate.errors import ConfigError
from obliviate.losses import IGNORE_INDEX, at_least_float32, ratio_of_sums, shift_targets
from obliviate.models.layers import (attention_heads, attention_projections, d_ff, in_dims_mask, mlp_down_proj,
                                     mlp_gate_or_none, mlp_up_proj, num_layers, out_dims_mask, unwrap)


@dataclass
class SGTMConfig:
    """Which parameters SGTM dedicates to the routed tokens (:attr:`PretrainConfig.route_splits`)."""

    heads: int = 1
    """Attention heads dedicated per layer (the last ones)."""
    mlp_units: int = 64
    """MLP hidden units dedicated per layer (the last ones)."""
    layers: list[int] | None = None
    """Decoder layers with dedicated parameters (None: every layer, as the paper's scripts)."""
    retain_share: float = 0.25
    """Share of steps whose other (non-routed) tokens train with the dedicated parts switched off."""

    def __post_init__(self):
        for key in ("heads", "mlp_units"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"config key 'sgtm.{key}': must be an integer >= 0, got {v!r}")
        if self.heads == 0 and self.mlp_units == 0:
            raise ConfigError("config keys 'sgtm.heads' and 'sgtm.mlp_units': both 0 dedicates nothing")
        if not 0 <= self.retain_share <= 1:
            raise ConfigError(f"config key 'sgtm.retain_share': must be in [0, 1], got {self.retain_share}")


def dedicated_masks(model: nn.Module, cfg: SGTMConfig) -> dict[str, torch.Tensor]:
    """``{parameter name: bool mask}`` of the parameter entries SGTM dedicates (see the module docstring),
    for every architecture :mod:`obliviate.models.layers` locates; names as in ``model.named_parameters()``.

    Under grouped-query attention a key/value head is dedicated only when every query head of its group is.
    ConfigError when the model has fewer heads or units than asked for (at least one must stay shared)."""
    names = {id(p): n for n, p in model.named_parameters()}
    masks: dict[str, torch.Tensor] = {}

    def add(mod: nn.Module, parts: dict[str, torch.Tensor]) -> None:
        for attr, m in parts.items():
            name = names[id(getattr(mod, attr))]
            masks[name] = masks[name] | m if name in masks else m

    n_layers = num_layers(model)
    layers = list(range(n_layers)) if cfg.layers is None else list(cfg.layers)
    for l in layers:
        if isinstance(l, bool) or not isinstance(l, int) or not 0 <= l < n_layers:
            raise ConfigError(f"config key 'sgtm.layers': layer {l!r} out of range for a {n_layers}-layer model")
    n_heads, n_kv, hd = attention_heads(model)
    if cfg.heads >= n_heads:
        raise ConfigError(f"config key 'sgtm.heads': {cfg.heads} dedicated of the model's {n_heads} heads "
                          "leaves none shared")
    group = n_heads // n_kv
    q_dims = torch.arange((n_heads - cfg.heads) * hd, n_heads * hd)
    kv_dims = torch.arange((n_kv - cfg.heads // group) * hd, n_kv * hd)
    for l in layers:
        if cfg.heads:
            proj = attention_projections(model, l)
            if "qkv" in proj:  # [q; k; v] in one map
                q_all, kv_all = n_heads * hd, n_kv * hd
                add(proj["qkv"], out_dims_mask(proj["qkv"], torch.cat([q_dims, q_all + kv_dims,
                                                                       q_all + kv_all + kv_dims])))
            else:
                add(proj["q"], out_dims_mask(proj["q"], q_dims))
                for k in ("k", "v") if len(kv_dims) else ():
                    add(proj[k], out_dims_mask(proj[k], kv_dims))
            add(proj["o"], in_dims_mask(proj["o"], q_dims))
        if cfg.mlp_units:
            down = mlp_down_proj(model, l)
            width = d_ff(model, l)
            if cfg.mlp_units >= width:
                raise ConfigError(f"config key 'sgtm.mlp_units': {cfg.mlp_units} dedicated of layer {l}'s {width} "
                                  "MLP units leaves none shared")
            units = torch.arange(width - cfg.mlp_units, width)
            for mod in (mlp_up_proj(model, l), mlp_gate_or_none(model, l)):
                if mod is not None:
                    add(mod, out_dims_mask(mod, units))
            add(down, in_dims_mask(down, units))
    return masks


def forget_params(model: nn.Module, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parameters a forget-labelled token's loss is computed with: the dedicated entries as they are (the
    gradient reaches them), every other entry a constant (no gradient reaches it)."""
    return {n: (p.detach() if n not in masks else torch.where(masks[n], p, p.detach()))
            for n, p in model.named_parameters()}


def retain_params(model: nn.Module, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parameters with the dedicated entries switched off (zero, and no gradient reaches them): the
    ablated model, trainable elsewhere."""
    return {n: (p if n not in masks else p.masked_fill(masks[n], 0.0)) for n, p in model.named_parameters()}


@torch.no_grad()
def ablate(model: nn.Module, masks: dict[str, torch.Tensor]) -> int:
    """Zero the dedicated entries of ``model`` in place; returns how many entries were zeroed."""
    params = dict(model.named_parameters())
    for n, m in masks.items():
        params[n].masked_fill_(m.to(params[n].device), 0.0)
    return int(sum(int(m.sum()) for m in masks.values()))


def _nll_sum(model: nn.Module, params: dict | None, batch: dict, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token NLL of ``labels`` (IGNORE_INDEX: no target) under ``model`` run with ``params``
    (None: its own)."""
    kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    m = unwrap(model)
    out = m(**kwargs) if params is None else torch.func.functional_call(m, params, (), kwargs)
    logits = at_least_float32(out.logits[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), shift_targets(labels).reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="sum")


def routed_loss(model: nn.Module, batches: list[dict], masks: dict[str, torch.Tensor],
                retain_mode: bool) -> torch.Tensor:
    """The mean next-token NLL over every target token of ``batches`` (one denominator, so the same value as a
    plain LM loss), with SGTM's gradients: the targets marked ``routed`` (a (B, T) tensor of each batch, 1 for
    a routed token) under :func:`forget_params`, the others under the model's own parameters, or
    :func:`retain_params` when ``retain_mode``."""
    m = unwrap(model)
    total, count = None, 0
    for batch in batches:
        labels = batch["labels"]
        routed = batch["routed"].to(labels.device) == 1
        count += int((shift_targets(labels) != IGNORE_INDEX).sum())
        parts = []
        other = labels.masked_fill(routed, IGNORE_INDEX)
        if (shift_targets(other) != IGNORE_INDEX).any():
            parts.append(_nll_sum(m, retain_params(m, masks) if retain_mode else None, batch, other))
        mine = labels.masked_fill(~routed, IGNORE_INDEX)
        if (shift_targets(mine) != IGNORE_INDEX).any():
            parts.append(_nll_sum(m, forget_params(m, masks), batch, mine))
        for p in parts:
            total = p if total is None else total + p
    if total is None:
        raise ValueError("routed_loss: no target token in the batches")
    return ratio_of_sums(total, torch.tensor(float(count), device=total.device))


def retain_step(seed: int, step: int, share: float) -> bool:
    """Whether step ``step`` trains its other tokens with the dedicated parts switched off (a seeded draw per
    step, so a resumed run draws the same)."""
    return bool(np.random.default_rng([seed, step, 0x5617]).random() < share)


# ------------------------------------------------------------------------------------------ label noise


def flipped(n: int, share: float, seed: int) -> np.ndarray:
    """Bool array: which of ``n`` labelled units become unlabelled at ``share``: exactly ``round(share * n)``
    of them, the first of one seeded order (so those flipped at a smaller share, same seed, are among
    them)."""
    if not 0 <= share <= 1:
        raise ConfigError(f"label noise share must be in [0, 1], got {share}")
    order = np.random.default_rng([seed, n, 0x4E01]).permutation(n)
    out = np.zeros(n, dtype=bool)
    out[order[:int(round(share * n))]] = True
    return out


def label_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of every maximal run of nonzero entries of the 1-D ``mask``."""
    m = np.concatenate([[0], (np.asarray(mask) != 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(m))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def flip_runs(masks: list[np.ndarray], share: float, seed: int) -> tuple[list[np.ndarray], int, int]:
    """``masks`` (one 0/1 array per sequence, 1: labelled) with a seeded share of their labelled runs
    (:func:`label_runs`, counted over every sequence) set to 0 (:func:`flipped`); returns the new masks, the
    number of runs and the number flipped."""
    runs = [(i, a, b) for i, m in enumerate(masks) for a, b in label_runs(m)]
    flip = flipped(len(runs), share, seed)
    out = [np.array(m, dtype=np.int64, copy=True) for m in masks]
    for (i, a, b), f in zip(runs, flip):
        if f:
            out[i][a:b] = 0
    return out, len(runs), int(flip.sum())
