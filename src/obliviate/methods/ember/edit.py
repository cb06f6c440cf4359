"""EMBER step 3: subtract concept features from input token embeddings; choose delta.

For each eligible token t (code exactly 1 and ``G_tk != 0`` for some selected feature
k in F_C), EMBER edits the INPUT embedding only::

    e_t <- e_t - delta * sum_{k in F_C} G_tk F[:, k]

(read in the paper and its code). The output embedding (``lm_head``) is left as it is. When
input and output embeddings are tied (one shared tensor), :func:`apply_ember` first
unties them: the ``lm_head`` gets its own copy of the weight and
``config.tie_word_embeddings`` becomes False, so the edit cannot reach the output side;
the :class:`EditRecord` says so, and :func:`restore_embeddings` re-ties.

Delta is chosen on the grid {0.5, 1, 2, 5, 10, 50, 100, 200} as the value with the best
harmonic mean of (efficacy, specificity, coherence) among those keeping utility >= 0.9
of the base model's (:func:`select_delta`). Metrics (:func:`~obliviate.eval.core.chance_corrected`):
``frac = clip((acc - 0.25) / (base - 0.25), 0, 1)``, efficacy = 1 - concept frac,
specificity = HM(utility frac, similar-domain frac). The paper edits at most 0.14% of the
vocabulary per concept; :attr:`EditRecord.vocab_fraction_edited` reports ours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from obliviate.methods.ember.factorize import CODE_CONCEPT, check_codes
from obliviate.errors import ConfigError, DataError, ModelError
from obliviate.eval.core import chance_corrected, harmonic_mean
from obliviate.models import layers

DELTA_GRID = (0.5, 1, 2, 5, 10, 50, 100, 200)
"""The EMBER delta grid of docs/methods.md."""

UTILITY_KEEP = 0.9
"""A delta qualifies only if utility >= UTILITY_KEEP * base utility."""


# --------------------------------------------------------------------------- embedding access
# The one place that knows how to find embeddings; switch here if obliviate.models.layers changes.

def _embeddings(model: nn.Module) -> tuple[nn.Module, nn.Module | None, bool]:
    """(input embedding module, output embedding module or None, tied?)."""

    return layers.input_embeddings(model), layers.output_embeddings(model), layers.embeddings_tied(model)


def _hf_model(model: nn.Module) -> nn.Module:
    return layers.unwrap(model)


def _configs(model: nn.Module) -> list:
    """The model config and, for composite models, its text config (each once)."""
    cfg = getattr(_hf_model(model), "config", None)
    if cfg is None:
        return []
    out = [cfg]
    get_text = getattr(cfg, "get_text_config", None)
    text = get_text() if get_text is not None else None
    if text is not None and text is not cfg:
        out.append(text)
    return out


def _set_tie_flag(model: nn.Module, values: list) -> None:
    for cfg, v in zip(_configs(model), values):
        if v is not _MISSING:
            cfg.tie_word_embeddings = v


_MISSING = object()


def _refresh_tied_keys(model: nn.Module) -> None:
    """Recompute transformers' record of tied parameters (v5: ``all_tied_weights_keys``) from the config."""
    base = _hf_model(model)
    if hasattr(base, "all_tied_weights_keys") and hasattr(base, "get_expanded_tied_weights_keys"):
        base.all_tied_weights_keys = base.get_expanded_tied_weights_keys(all_submodels=True)


def untie_embeddings(model: nn.Module) -> bool:
    """Give the ``lm_head`` its own copy of a tied weight; returns True if it was tied.

    Sets ``tie_word_embeddings=False`` on the config (and text config), so
    ``model.tie_weights()``, saving and reloading keep the two apart.
    """
    emb_in, emb_out, tied = _embeddings(model)
    if not tied:
        return False
    with torch.no_grad():
        emb_out.weight = nn.Parameter(emb_in.weight.detach().clone(),
                                      requires_grad=emb_in.weight.requires_grad)
    _set_tie_flag(model, [False] * len(_configs(model)))
    _refresh_tied_keys(model)
    return True


# --------------------------------------------------------------------------- snapshot / restore


@dataclass
class EmbeddingSnapshot:
    """Copies of the embedding weights and tying state, for :func:`restore_embeddings`."""

    input_weight: torch.Tensor
    output_weight: torch.Tensor | None  # None when tied (or no lm_head)
    tied: bool
    tie_flags: list = field(default_factory=list)
    tied_keys: dict | None = None


def snapshot_embeddings(model: nn.Module) -> EmbeddingSnapshot:
    """Copy the input (and, if untied, output) embedding weights and the tying state."""
    emb_in, emb_out, tied = _embeddings(model)
    out_w = None if (tied or emb_out is None) else emb_out.weight.detach().clone()
    keys = getattr(_hf_model(model), "all_tied_weights_keys", None)
    return EmbeddingSnapshot(
        input_weight=emb_in.weight.detach().clone(),
        output_weight=out_w,
        tied=tied,
        tie_flags=[getattr(c, "tie_word_embeddings", _MISSING) for c in _configs(model)],
        tied_keys=dict(keys) if keys is not None else None,
    )


def restore_embeddings(model: nn.Module, snapshot: EmbeddingSnapshot) -> None:
    """Put the embeddings back exactly as in ``snapshot`` (bit for bit), re-tying if they were tied.

    Weights are copied in place, so the input embedding stays the same ``Parameter``
    object (optimizers and hooks holding it keep working).
    """
    emb_in, emb_out, tied = _embeddings(model)
    if emb_in.weight.shape != snapshot.input_weight.shape:
        raise ModelError(
            f"cannot restore embeddings: shape {tuple(emb_in.weight.shape)} != "
            f"snapshot {tuple(snapshot.input_weight.shape)}"
        )
    with torch.no_grad():
        emb_in.weight.copy_(snapshot.input_weight)
        if snapshot.tied and not tied:
            emb_out.weight = emb_in.weight
        elif not snapshot.tied and tied and snapshot.output_weight is not None:
            emb_out.weight = nn.Parameter(snapshot.output_weight.clone(),
                                          requires_grad=emb_in.weight.requires_grad)
        elif snapshot.output_weight is not None:
            emb_out.weight.copy_(snapshot.output_weight)
    _set_tie_flag(model, snapshot.tie_flags)
    base = _hf_model(model)
    if snapshot.tied_keys is not None and hasattr(base, "all_tied_weights_keys"):
        base.all_tied_weights_keys = dict(snapshot.tied_keys)


# --------------------------------------------------------------------------- eligibility and directions


def _check_features(G: torch.Tensor, selected_features: Sequence[int]) -> torch.Tensor:
    feats = torch.as_tensor(list(selected_features), dtype=torch.long, device=G.device)
    if feats.numel() and (feats.min() < 0 or feats.max() >= G.shape[1]):
        raise ConfigError(f"EMBER: selected features {feats.tolist()} out of range 0..{G.shape[1] - 1}")
    return feats


def eligible_rows(G: torch.Tensor, codes: torch.Tensor, selected_features: Sequence[int]) -> torch.Tensor:
    """Row indices (into V') of tokens with code exactly 1 and ``G_tk != 0`` for some selected k."""
    codes = check_codes(G, codes)
    feats = _check_features(G, selected_features)
    if feats.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    active = (G[:, feats] != 0).any(dim=1)
    return torch.nonzero(active & (codes == CODE_CONCEPT)).flatten().cpu()


def eligible_tokens(G: torch.Tensor, codes: torch.Tensor, token_ids: torch.Tensor,
                    selected_features: Sequence[int]) -> torch.Tensor:
    """Token ids of the eligible rows (see :func:`eligible_rows`)."""
    token_ids = torch.as_tensor(token_ids)
    if token_ids.shape != (G.shape[0],):
        raise DataError(f"EMBER: token_ids has shape {tuple(token_ids.shape)}, expected ({G.shape[0]},)")
    return token_ids[eligible_rows(G, codes, selected_features)]


def ember_delta_rows(F: torch.Tensor, G: torch.Tensor, selected_features: Sequence[int],
                     rows: torch.Tensor) -> torch.Tensor:
    """Edit directions ``sum_{k in F_C} G_tk F[:, k]`` for each row t in ``rows``: shape (len(rows), d)."""
    feats = _check_features(G, selected_features)
    rows = torch.as_tensor(rows, dtype=torch.long, device=G.device)
    return G[rows][:, feats] @ F[:, feats].T  # (R, |F_C|) @ (|F_C|, d) -> (R, d)


# --------------------------------------------------------------------------- the edit


@dataclass
class EditRecord:
    """What :func:`apply_ember` changed."""

    token_ids: list[int]
    delta: float
    vocab_size: int
    untied: bool
    """True if tied input/output embeddings were untied to keep the output side unchanged."""
    max_row_change: float = 0.0
    """Largest L2 norm of a row change (as stored, after rounding to the weight dtype)."""

    @property
    def n_edited(self) -> int:
        return len(self.token_ids)

    @property
    def vocab_fraction_edited(self) -> float:
        """``len(token_ids) / vocab_size`` (the paper reports at most 0.0014)."""
        return self.n_edited / self.vocab_size if self.vocab_size else 0.0


def apply_ember(model: nn.Module, token_ids, directions: torch.Tensor, delta: float) -> EditRecord:
    """``e_t <- e_t - delta * directions[i]`` for ``t = token_ids[i]``, on the input embedding only.

    ``directions`` is (len(token_ids), d), e.g. from :func:`ember_delta_rows`. Ties are
    undone first (module docstring). The update is computed in float32 and stored in the
    weight's dtype; rows not listed are untouched (bit-identical).
    """
    ids = torch.as_tensor(token_ids, dtype=torch.long).flatten().cpu()
    emb_in, _, _ = _embeddings(model)
    V, d = emb_in.weight.shape
    if ids.numel() != len(set(ids.tolist())):
        raise ConfigError("EMBER: token_ids contains duplicates")
    if ids.numel() and (ids.min() < 0 or ids.max() >= V):
        raise ConfigError(f"EMBER: token ids out of range 0..{V - 1}")
    directions = torch.as_tensor(directions)
    if directions.shape != (ids.numel(), d):
        raise DataError(f"EMBER: directions has shape {tuple(directions.shape)}, "
                        f"expected ({ids.numel()}, {d})")
    if not math.isfinite(float(delta)):
        raise ConfigError(f"EMBER: delta={delta!r} must be a finite number")
    if not torch.isfinite(directions).all():
        raise DataError("EMBER: directions contain NaN or inf")
    untied = untie_embeddings(model)
    max_change = 0.0
    if ids.numel():
        w = emb_in.weight
        idx = ids.to(w.device)
        with torch.no_grad():
            old = w[idx].float()
            new = (old - float(delta) * directions.to(device=w.device, dtype=torch.float32)).to(w.dtype)
            w[idx] = new
            max_change = float((new.float() - old).norm(dim=1).max())
    return EditRecord(token_ids=ids.tolist(), delta=float(delta), vocab_size=V, untied=untied,
                      max_row_change=max_change)


# --------------------------------------------------------------------------- metrics and delta selection


def efficacy(concept_acc: float, concept_base: float, chance: float = 0.25) -> float:
    """``1 - chance_corrected(concept accuracy)``: 1 = concept at chance, 0 = untouched."""
    return 1.0 - chance_corrected(concept_acc, concept_base, chance)


def specificity(utility_acc: float, utility_base: float, similar_acc: float, similar_base: float,
                chance: float = 0.25) -> float:
    """``HM(normalised utility frac, normalised similar-domain frac)``: 1 = nothing else lost."""
    return harmonic_mean([chance_corrected(utility_acc, utility_base, chance),
                          chance_corrected(similar_acc, similar_base, chance)])


@dataclass
class DeltaChoice:
    """Result of :func:`select_delta`."""

    delta: float
    score: float
    """HM(efficacy, specificity, coherence) of the chosen delta."""
    qualified: bool
    """False when no delta kept utility >= 0.9 * base, and the smallest delta was taken as a fallback."""
    row: dict
    reason: str


_REQUIRED = ("delta", "efficacy", "specificity", "coherence", "utility")


def select_delta(results: Sequence[dict], base_utility: float, grid: Sequence[float] | None = DELTA_GRID,
                 utility_keep: float = UTILITY_KEEP) -> DeltaChoice:
    """Best delta by HM(efficacy, specificity, coherence) subject to utility >= 0.9 * base_utility.

    ``results``: one dict per tried delta with keys delta, efficacy, specificity,
    coherence, utility. Only deltas on ``grid`` are considered (``grid=None``: all).
    Ties go to the smaller delta (the gentler edit). If no delta keeps enough utility,
    the smallest delta is returned with ``qualified=False`` (and a reason saying so),
    so a caller can flag the run instead of silently reporting it.
    """
    for r in results:
        missing = [k for k in _REQUIRED if k not in r]
        if missing:
            raise ConfigError(f"EMBER: delta result {r!r} lacks {missing}")
    on_grid = [r for r in results if grid is None or any(math.isclose(float(r["delta"]),
                                                                      float(g)) for g in grid)]
    if not on_grid:
        raise ConfigError(f"EMBER: no results for deltas on the grid {list(grid)}")
    floor = utility_keep * base_utility
    ok = [r for r in on_grid if r["utility"] >= floor]
    if not ok:
        r = min(on_grid, key=lambda r: float(r["delta"]))
        score = harmonic_mean([r["efficacy"], r["specificity"], r["coherence"]])
        return DeltaChoice(float(r["delta"]), score, False, dict(r),
                           f"no delta kept utility >= {floor:.4g}; fell back to the smallest delta")
    scored = [(harmonic_mean([r["efficacy"], r["specificity"], r["coherence"]]), -float(r["delta"]),
               r) for r in ok]
    score, _, r = max(scored, key=lambda x: (x[0], x[1]))
    return DeltaChoice(float(r["delta"]), score, True, dict(r),
                       f"best HM among {len(ok)} deltas with utility >= {floor:.4g}")
