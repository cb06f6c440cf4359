"""Edit-style methods "ember" (embedding edit) and "snmf" (MLP edit): no training loop.

Both follow docs/methods.md ([paper/code]); the maths is in :mod:`obliviate.ember` (EMBER:
``factorize``, ``judge``, ``edit``, ``pipeline``; SNMF: ``snmf``). An edit method has
``kind = "edit"`` and ``edit(model, tokenizer, data) -> dict`` (a JSON-serialisable
summary), editing ``model`` in place. ``data`` is a mapping with

* ``concept_sentences``, ``neutral_sentences`` (required; e.g. ``world.concept``);
* ``exclusive_terms`` (optional): concept terms for the offline :class:`LexiconJudge`;
  without them the judge is built from the sentences (``judge_from_sentences``);
* ``judge`` (optional): any :class:`~obliviate.ember.judge.Judge` (e.g. an ``HTTPJudge``), used as is.

Each call snapshots the weights it changes; ``method.restore(model)`` puts them back bit
for bit (e.g. between deltas of a grid).
"""

from __future__ import annotations

from dataclasses import dataclass

from obliviate.errors import ConfigError, DataError
from obliviate.methods import register


def _sentences(data) -> tuple[list[str], list[str]]:
    try:
        return list(data["concept_sentences"]), list(data["neutral_sentences"])
    except (KeyError, TypeError):
        raise DataError("edit methods need data with 'concept_sentences' and 'neutral_sentences'") from None


def concept_judge(data):
    """The judge for ``data``: ``data['judge']``, else a LexiconJudge of ``exclusive_terms``, else from sentences."""
    from obliviate.ember.judge import LexiconJudge, judge_from_sentences

    if data.get("judge") is not None:
        return data["judge"]
    if data.get("exclusive_terms"):
        return LexiconJudge(data["exclusive_terms"])
    concept, neutral = _sentences(data)
    return judge_from_sentences(concept, neutral)


@dataclass
class EmberEditConfig:
    delta: float = 1.0
    """Edit strength (choose it on the grid with ``obliviate.ember.select_delta``)."""
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


@register("ember", paper="Suslik, Shafran, Geva 2026, EMBER (embedding erasure)",
          equation=("E′ = E − δ · Σ_k (judged concept features of the sparse factorisation E ≈ Z D) on concept-only "
                    "token rows"),
          trains="input embedding rows of concept-only tokens")
class EmberEdit:
    """EMBER: subtract judged concept features from concept-only input embeddings."""

    kind = "edit"
    config_cls = EmberEditConfig
    needs_reference = False

    def __init__(self, cfg: EmberEditConfig):
        self.cfg = cfg
        self.snapshot = None
        self.result = None

    def edit(self, model, tokenizer, data) -> dict:
        from obliviate.ember import build_vocab, ember_erase, snapshot_embeddings
        from obliviate.train.distributed import check_method

        check_method(self)  # writes embedding rows in place: refused on a sharded model
        concept, neutral = _sentences(data)
        K = self.cfg.K or min(100, int(build_vocab(tokenizer, concept, neutral)[0].numel()))
        self.snapshot = snapshot_embeddings(model)
        self.result = ember_erase(model, tokenizer, concept, neutral, concept_judge(data), K, self.cfg.delta,
                                  self.cfg.seed, sparsity=self.cfg.sparsity, min_ratio=self.cfg.min_ratio,
                                  min_confidence=self.cfg.min_confidence,
                                  factor_kwargs={"max_iter": self.cfg.max_iter, "patience": self.cfg.patience})
        return {"method": "ember", **self.result.summary()}

    def restore(self, model) -> None:
        from obliviate.ember import restore_embeddings

        if self.snapshot is not None:
            restore_embeddings(model, self.snapshot)


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


@register("snmf", paper="semi-NMF of MLP activations, as in Suslik, Shafran, Geva 2026 (EMBER)",
          equation="project the semi-NMF concept features of MLP activations out of W_down (and W_up)",
          trains="MLP weights of the located layers")
class SNMFEdit:
    """SNMF: semi-NMF concept features of MLP activations, projected out of W_down / W_up."""

    kind = "edit"
    config_cls = SNMFEditConfig
    needs_reference = False

    def __init__(self, cfg: SNMFEditConfig):
        self.cfg = cfg
        self.snapshot = None
        self.location = None
        self.record = None

    def edit(self, model, tokenizer, data) -> dict:
        from obliviate.ember.snmf import apply_snmf, snapshot_mlp, snmf_locate
        from obliviate.models.layers import num_layers
        from obliviate.train.distributed import check_method

        check_method(self)  # writes MLP weights in place: refused on a sharded model
        concept, neutral = _sentences(data)
        layers = self.cfg.layers if self.cfg.layers is not None else [num_layers(model) // 2]
        self.location = snmf_locate(model, tokenizer, concept, neutral, layers, self.cfg.K,
                                    sparsity=self.cfg.sparsity, n_iter=self.cfg.n_iter, seed=self.cfg.seed,
                                    min_ratio=self.cfg.min_ratio, max_features=self.cfg.max_features)
        self.snapshot = snapshot_mlp(model, list(self.location.layers))
        self.record = apply_snmf(model, self.location, self.cfg.delta, self.cfg.edit_up)
        return {"method": "snmf", "delta": self.record.delta, "n_features": self.record.n_features,
                **self.location.summary()}

    def restore(self, model) -> None:
        from obliviate.ember.snmf import restore_mlp

        if self.snapshot is not None:
            restore_mlp(model, self.snapshot)
