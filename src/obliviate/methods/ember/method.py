"""Edit method "ember": EMBER's embedding edit (Suslik, Shafran, Geva 2026); the maths is in
:mod:`obliviate.methods.ember` (``factorize``, ``judge``, ``edit``, ``pipeline``; docs/methods.md).

An edit method has ``kind = "edit"`` and ``edit(model, tokenizer, data) -> dict`` (a JSON-serialisable
summary), editing ``model`` in place, without the training loop. ``data`` is a mapping with

* ``concept_sentences``, ``neutral_sentences`` (required; e.g. ``world.concept``);
* ``exclusive_terms`` (optional): concept terms for the offline
  :class:`~obliviate.methods.ember.judge.LexiconJudge`; without them the judge is built from the sentences
  (``judge_from_sentences``);
* ``judge`` (optional): any :class:`~obliviate.methods.ember.judge.Judge` (e.g. the LLM judge
  :class:`obliviate.integrations.llm_judge.HTTPJudge`), used as is.

Each call snapshots the weights it changes; ``method.restore(model)`` puts them back bit
for bit (e.g. between deltas of a grid).
"""

from __future__ import annotations

from dataclasses import dataclass

from obliviate.methods.ember.edit import restore_embeddings, snapshot_embeddings
from obliviate.methods.ember.factorize import build_vocab
from obliviate.methods.ember.pipeline import ember_erase
from obliviate.methods.ember.judge import concept_judge, edit_sentences
from obliviate.config import check_ranges
from obliviate.errors import ConfigError
from obliviate.unlearning.contract import Method, register
from obliviate.train.distributed import check_method


@dataclass
class EmberEditConfig:
    delta: float = 1.0
    """Edit strength (choose it on the grid with ``obliviate.methods.ember.select_delta``)."""
    K: int | None = None
    """Number of embedding features; None = min(100, |V'|)."""
    sparsity: float = 0.01
    min_ratio: float = 2.0
    min_confidence: float = 0.85
    max_iter: int = 20000
    patience: int = 500
    seed: int = 42

    def __post_init__(self):
        if self.K is not None and self.K < 1:
            raise ConfigError(f"config key 'K': must be >= 1, got {self.K}")
        check_ranges(self, fraction=("sparsity", "min_confidence"), nonnegative=("min_ratio",),
                     at_least_one=("max_iter", "patience"))
        if self.sparsity == 0:
            raise ConfigError("config key 'sparsity': must be in (0, 1], got 0 (no non-zero per feature)")


@register("ember", paper="Suslik, Shafran, Geva 2026, EMBER (embedding erasure)",
          equation=("E′ = E − δ · Σ_k (judged concept features of the sparse factorisation E ≈ Z D) on "
                    "concept-only token rows"),
          trains="input embedding rows of concept-only tokens")
class EmberEdit(Method):
    """EMBER: subtract judged concept features from concept-only input embeddings."""

    kind = "edit"
    config_cls = EmberEditConfig
    needs_reference = False

    def __init__(self, cfg: EmberEditConfig):
        self.cfg = cfg
        self.snapshot = None
        self.result = None

    def edit(self, model, tokenizer, data) -> dict:
        check_method(self)
        concept, neutral = edit_sentences(data)
        K = self.cfg.K or min(100, int(build_vocab(tokenizer, concept, neutral)[0].numel()))
        self.snapshot = snapshot_embeddings(model)
        self.result = ember_erase(model, tokenizer, concept, neutral, concept_judge(data), K, self.cfg.delta,
                                  self.cfg.seed, sparsity=self.cfg.sparsity, min_ratio=self.cfg.min_ratio,
                                  min_confidence=self.cfg.min_confidence,
                                  factor_kwargs={"max_iter": self.cfg.max_iter,
                                                 "patience": self.cfg.patience})
        return {"method": "ember", **self.result.summary()}

    def restore(self, model) -> None:
        if self.snapshot is not None:
            restore_embeddings(model, self.snapshot)
