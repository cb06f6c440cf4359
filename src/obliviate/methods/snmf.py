"""Edit method "snmf": semi-NMF concept features of MLP activations projected out of the MLP weights, as in
Suslik, Shafran, Geva 2026 (EMBER's MLP baseline); the maths is in :mod:`obliviate.methods.ember.snmf`.

An edit method has ``kind = "edit"`` and ``edit(model, tokenizer, data) -> dict`` (a JSON-serialisable
summary), editing ``model`` in place, without the training loop. ``data`` is a mapping with

* ``concept_sentences``, ``neutral_sentences`` (required; e.g. ``world.concept``);

Each call snapshots the weights it changes; ``method.restore(model)`` puts them back bit
for bit (e.g. between deltas of a grid).
"""

from __future__ import annotations

from dataclasses import dataclass

from obliviate.methods.ember.judge import edit_sentences
from obliviate.methods.ember.snmf import apply_snmf, restore_mlp, snapshot_mlp, snmf_locate
from obliviate.errors import ConfigError
from obliviate.methods import register
from obliviate.models.layers import num_layers
from obliviate.train.distributed import check_method


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
