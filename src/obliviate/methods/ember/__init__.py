"""EMBER: erase a concept by editing token embeddings (Suslik, Shafran, Geva 2026; docs/methods.md).

* :mod:`.factorize` — vocabulary V' and codes, sparse (winner-takes-all) factorisation
  of the embeddings, mass ratio.
* :mod:`.judge` — is a feature about the concept? (the offline lexicon judge; the LLM judge on an
  endpoint is :mod:`obliviate.integrations.llm_judge`)
* :mod:`.edit` — the embedding edit, untie/snapshot/restore, metrics, delta selection.
* :mod:`.pipeline` — ``locate_concept_features`` and ``ember_erase``.
* :mod:`.method` — the registered edit method ``ember``.
* :mod:`.combine` — EMBER, then an MLP method (``rmu+ember``, ``snmf+ember``, ``crisp+ember``).
"""

from obliviate.methods.ember.edit import (
    DELTA_GRID,
    DeltaChoice,
    EditRecord,
    EmbeddingSnapshot,
    apply_ember,
    efficacy,
    eligible_rows,
    eligible_tokens,
    ember_delta_rows,
    restore_embeddings,
    select_delta,
    snapshot_embeddings,
    specificity,
    untie_embeddings,
)
from obliviate.methods.ember.factorize import (
    FactorResult,
    build_vocab,
    candidate_features,
    mass_ratio,
    sparse_factorize,
    top_token_ids,
    winner_takes_all,
)
from obliviate.methods.ember.judge import (
    Judge,
    Judgement,
    LexiconJudge,
    judge_features,
    judge_from_sentences,
    keep,
)
from obliviate.methods.ember.pipeline import EmberLocation, EmberResult, ember_erase, locate_concept_features
from obliviate.methods.ember.method import EmberEdit, EmberEditConfig  # registers "ember"

__all__ = [
    "DELTA_GRID", "DeltaChoice", "EditRecord", "EmbeddingSnapshot", "EmberEdit", "EmberEditConfig",
    "EmberLocation",
    "EmberResult", "FactorResult", "Judge", "Judgement", "LexiconJudge", "apply_ember", "build_vocab",
    "candidate_features", "efficacy",
    "eligible_rows", "eligible_tokens", "ember_delta_rows", "ember_erase", "judge_features",
    "judge_from_sentences", "keep", "locate_concept_features", "mass_ratio",
    "restore_embeddings", "select_delta", "snapshot_embeddings", "sparse_factorize", "specificity",
    "top_token_ids", "untie_embeddings", "winner_takes_all",
]
