"""EMBER combined with an MLP method: ``rmu+ember``, ``snmf+ember``, ``crisp+ember`` (docs/methods.md).

Protocol: delta is fixed first, from the EMBER-only grid (:func:`obliviate.methods.ember.select_delta`);
EMBER is applied with that delta, then the MLP method runs on top of the edited model
(for a training method the frozen reference is therefore the EMBER-edited model). Any
registered method works: training methods go through :func:`obliviate.unlearning.engine.unlearn`,
edit methods (``kind = "edit"``) through their ``edit``.

``unlearn_fn(method_name, model) -> (model, record)`` does the second stage;
:func:`obliviate.unlearning.engine.method_runner` builds one from the usual unlearning inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from obliviate.methods.ember.factorize import build_vocab
from obliviate.methods.ember.judge import Judge
from obliviate.methods.ember.pipeline import EmberResult, ember_erase
from obliviate.errors import ConfigError

EMBER_SUFFIX = "+ember"


def split_combo(name: str) -> tuple[str, bool]:
    """``"rmu+ember" -> ("rmu", True)``; ``"rmu" -> ("rmu", False)``."""
    if name.endswith(EMBER_SUFFIX):
        base = name[: -len(EMBER_SUFFIX)]
        if not base:
            raise ConfigError(f"method {name!r}: nothing before '+ember'")
        return base, True
    return name, False


@dataclass
class Combined:
    """Result of :func:`ember_then`."""

    model: nn.Module
    ember: EmberResult
    method: dict
    """The second stage's record (the training summary or the edit summary)."""
    method_name: str

    def records(self) -> dict:
        """JSON-serialisable records of both stages."""
        return {"ember": self.ember.summary(), self.method_name: self.method}


def ember_then(method_name: str, model: nn.Module, tokenizer, concept: Sequence[str], neutral: Sequence[str],
               judge: Judge, delta: float, unlearn_fn: Callable[[str, nn.Module], tuple[nn.Module, dict]], *,
               K: int | None = None, seed: int = 42, location=None, **locate_kwargs) -> Combined:
    """EMBER with the fixed ``delta`` (in place), then ``unlearn_fn(base_method, model)`` on top.

    ``method_name`` may carry the ``+ember`` suffix. ``K`` defaults to min(100, |V'|).
    ``location`` (an :class:`~obliviate.methods.ember.pipeline.EmberLocation` from the EMBER-only
    grid on the same base model) skips re-locating the features.
    """

    base, _ = split_combo(method_name)
    if K is None and location is None:
        K = min(100, int(build_vocab(tokenizer, concept, neutral)[0].numel()))
    ember = ember_erase(model, tokenizer, concept, neutral, judge, K, delta, seed, location=location,
                        **locate_kwargs)
    model, record = unlearn_fn(base, model)
    return Combined(model=model, ember=ember, method=record, method_name=base)
