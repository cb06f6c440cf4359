"""``probe_unlearn_single``: the single-layer ablation of ``probe_unlearn`` (:mod:`.probe_unlearn`; a
reconstruction of Atil, Gupta, Passonneau 2026): the same probe loss at one layer, by default n_layers // 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from obliviate.errors import ConfigError
from obliviate.unlearning.contract import register, weighted_search
from obliviate.methods.probe_unlearn import PAPER, ProbeUnlearn, ProbeUnlearnConfig


@dataclass
class ProbeUnlearnSingleConfig(ProbeUnlearnConfig):
    """As :class:`ProbeUnlearnConfig`, with one layer (None = the middle layer)."""

    def __post_init__(self):
        super().__post_init__()
        if self.layers is not None and len(self.layers) != 1:
            raise ConfigError("config key 'layers': the single-layer "
                              f"variant takes one layer, got {self.layers}")


@register("probe_unlearn_single", paper=PAPER,
          equation="probe_unlearn at one layer "
                   "(ablation)", trains="MLP down-projections up to the probed layer",
          search=weighted_search("alpha"))
class ProbeUnlearnSingle(ProbeUnlearn):
    """Single-layer ablation of :class:`ProbeUnlearn` (default layer n_layers // 2)."""

    config_cls = ProbeUnlearnSingleConfig

    def default_layers(self, n_layers: int) -> list[int]:
        return [n_layers // 2]
