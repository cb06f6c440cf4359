"""EMBER end to end: locate concept features in the embeddings, then subtract them.

``locate_concept_features`` (vocabulary -> factorisation -> mass ratio -> judge ->
eligible tokens and edit directions) does not depend on delta, so a delta grid should
call it once and then :func:`ember_erase` with ``location=`` for each delta, restoring
the embeddings in between (:func:`~obliviate.methods.ember.edit.snapshot_embeddings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from obliviate.methods.ember.edit import EditRecord, _embeddings, apply_ember, ember_delta_rows, eligible_rows
from obliviate.methods.ember.factorize import (
    FactorResult,
    build_vocab,
    candidate_features,
    mass_ratio,
    sparse_factorize,
    top_token_ids,
)
from obliviate.methods.ember.judge import MIN_CONFIDENCE, N_TOP_TOKENS, Judge, Judgement, judge_features


@dataclass
class EmberLocation:
    """Everything EMBER found before editing (independent of delta)."""

    token_ids: torch.Tensor
    """(n,) V', sorted token ids."""
    codes: torch.Tensor
    """(n,) 1 concept-only, 0 neutral-only, 2 both."""
    factor_result: FactorResult
    ratios: torch.Tensor
    """(K,) mass ratio per feature."""
    candidates: list[int]
    """Features with ratio >= min_ratio, highest first."""
    top_tokens: dict[int, list[str]]
    """Decoded top tokens shown to the judge, per candidate."""
    judgements: dict[int, Judgement]
    features: list[int]
    """F_C: candidates the judge kept."""
    rows: torch.Tensor
    """Eligible rows of V' (code 1, non-zero on some feature of F_C)."""
    eligible_token_ids: torch.Tensor
    directions: torch.Tensor
    """(len(rows), d) unscaled edit directions sum_{k in F_C} G_tk F[:, k]."""


def locate_concept_features(
    model: nn.Module,
    tokenizer,
    concept_sentences: Sequence[str],
    neutral_sentences: Sequence[str],
    judge: Judge,
    K: int,
    seed: int = 42,
    *,
    sparsity: float = 0.01,
    min_ratio: float = 2.0,
    min_confidence: float = MIN_CONFIDENCE,
    n_top_tokens: int = N_TOP_TOKENS,
    factor_kwargs: dict | None = None,
) -> EmberLocation:
    """Steps 1-2 of EMBER on the model's current input embeddings (nothing is modified)."""
    token_ids, codes = build_vocab(tokenizer, concept_sentences, neutral_sentences)
    emb_in, _, _ = _embeddings(model)
    W = emb_in.weight.detach()
    A = W[token_ids.to(W.device)].float().T  # (d, n)
    fr = sparse_factorize(A, K, sparsity=sparsity, seed=seed, **(factor_kwargs or {}))
    G = fr.G
    ratios = mass_ratio(G, codes)
    candidates = candidate_features(G, codes, min_ratio)
    top = {k: [tokenizer.decode([t]) for t in top_token_ids(G, token_ids, k,
                                                            n_top_tokens)] for k in candidates}
    features, judgements = judge_features(judge, top, min_confidence)
    rows = eligible_rows(G, codes, features)
    directions = ember_delta_rows(fr.F, G, features, rows)
    return EmberLocation(token_ids, codes, fr, ratios.cpu(), candidates, top, judgements, features, rows,
                         token_ids[rows], directions)


@dataclass
class EmberResult:
    """What :func:`ember_erase` did."""

    features: list[int]
    eligible_token_ids: list[int]
    vocab_fraction_edited: float
    factor_result: FactorResult
    record: EditRecord
    location: EmberLocation = field(repr=False)

    def summary(self) -> dict:
        """JSON-serialisable summary (for results files)."""
        loc, fr = self.location, self.factor_result
        return {
            "delta": self.record.delta,
            "features": self.features,
            "n_candidates": len(loc.candidates),
            "judgements": {str(k): v.to_dict() for k, v in loc.judgements.items()},
            "n_sentence_tokens": int(loc.token_ids.numel()),  # |V'|
            "n_edited": self.record.n_edited,
            "eligible_token_ids": self.eligible_token_ids,
            "vocab_fraction_edited": self.vocab_fraction_edited,
            "untied_embeddings": self.record.untied,
            "factor_loss": fr.loss,
            "factor_iters": fr.n_iter,
            "factor_seed": fr.seed,
            "factor_attempts": fr.attempts,
        }


def ember_erase(
    model: nn.Module,
    tokenizer,
    concept_sentences: Sequence[str],
    neutral_sentences: Sequence[str],
    judge: Judge,
    K: int,
    delta: float,
    seed: int = 42,
    *,
    location: EmberLocation | None = None,
    **locate_kwargs,
) -> EmberResult:
    """Locate (unless ``location`` is given) and apply the EMBER edit with strength ``delta``, in place."""
    if location is None:
        location = locate_concept_features(model, tokenizer, concept_sentences, neutral_sentences, judge, K,
                                           seed,
                                           **locate_kwargs)
    record = apply_ember(model, location.eligible_token_ids, location.directions, delta)
    return EmberResult(
        features=list(location.features),
        eligible_token_ids=[int(t) for t in location.eligible_token_ids],
        vocab_fraction_edited=record.vocab_fraction_edited,
        factor_result=location.factor_result,
        record=record,
        location=location,
    )
