"""EMBER combined with an MLP method: ``rmu+ember``, ``snmf+ember``, ``crisp+ember`` (docs/methods.md).

Protocol: delta is fixed first, from the EMBER-only grid (:func:`obliviate.ember.select_delta`);
EMBER is applied with that delta, then the MLP method runs on top of the edited model
(for a training method the frozen reference is therefore the EMBER-edited model). Any
registered method works: training methods go through :func:`obliviate.executor.unlearn`,
edit methods (``kind = "edit"``) through their ``edit``.

``unlearn_fn(method_name, model) -> (model, record)`` does the second stage;
:func:`method_runner` builds one from the usual unlearning inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from obliviate.ember.judge import Judge
from obliviate.ember.pipeline import EmberResult, ember_erase
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
    ``location`` (an :class:`~obliviate.ember.pipeline.EmberLocation` from the EMBER-only
    grid on the same base model) skips re-locating the features.
    """
    from obliviate.ember.factorize import build_vocab

    base, _ = split_combo(method_name)
    if K is None and location is None:
        K = min(100, int(build_vocab(tokenizer, concept, neutral)[0].numel()))
    ember = ember_erase(model, tokenizer, concept, neutral, judge, K, delta, seed, location=location,
                        **locate_kwargs)
    model, record = unlearn_fn(base, model)
    return Combined(model=model, ember=ember, method=record, method_name=base)


def method_runner(tokenizer, forget: list[tuple[str, str]] | None = None, retain: list[tuple[str, str]] | None = None,
                  cfg=None, *, edit_data: dict | None = None, params: dict | None = None,
                  out_dir: str | Path | None = None, progress: bool | None = False):
    """An ``unlearn_fn`` for :func:`ember_then` that runs any registered method.

    Training methods: ``unlearn(model, tokenizer, forget, retain, cfg with method=name)``
    (``cfg`` an :class:`~obliviate.executor.UnlearnConfig`; its ``params`` are used unless
    ``params`` is given). Edit methods: ``build_method(name, params).edit(model, tokenizer, edit_data)``.
    """
    from obliviate.methods import build_method, get_method

    def run(name: str, model: nn.Module) -> tuple[nn.Module, dict]:
        if getattr(get_method(name), "kind", "train") == "edit":
            if edit_data is None:
                raise ConfigError(f"method {name!r} is an edit method: give edit_data (concept/neutral sentences)")
            return model, build_method(name, params).edit(model, tokenizer, edit_data)
        from obliviate.executor import UnlearnConfig, unlearn

        if forget is None or retain is None:
            raise ConfigError(f"method {name!r} trains: give forget and retain pairs")
        ucfg = cfg or UnlearnConfig()
        ucfg = dataclasses.replace(ucfg, method=name, params=ucfg.params if params is None else params)
        model, summary = unlearn(model, tokenizer, forget, retain, ucfg, out_dir, progress=progress)
        return model, {k: v for k, v in summary.items() if k != "method_obj"}

    return run
