"""The method contract, as code: every hook a method may implement, what declares what, and checks.

A training method (``kind = "train"``, the default) is a class registered with
:func:`obliviate.methods.register` that has:

- ``config_cls``: its config dataclass (defaults documented there);
- ``trainable(model) -> list[str]``: fnmatch patterns of the parameters it trains;
- ``loss(model, batch, ref) -> {name: tensor}``: the named, already weighted loss terms of one paired
  batch ``{"forget": ..., "retain": ..., ["idk": ...]}``; each sub-batch has ``input_ids``,
  ``attention_mask``, ``labels`` and ``index`` (example numbers).

An edit method (``kind = "edit"``) has ``edit(model, tokenizer, data) -> dict`` instead of ``loss``.

Optional declarations (class attributes; :data:`DECLARATIONS` gives their defaults):

- ``needs_reference``: it reads a frozen reference (``ref``); without it ``ref`` is a
  :class:`NoReference` whose every use is a one-line error naming the method;
- ``needs_idk``: its batches carry ``idk`` (the forget questions with refusal answers);
- ``multiprocess_unsupported`` / ``sharding_unsupported``: why it cannot run in several processes /
  on a sharded model (None: it can).

Optional hooks (methods; :data:`HOOKS`), each called only where the method has it:

- ``cached_reference_keys() -> tuple``: sub-batches whose reference term is a fixed per-sequence
  log-probability, computed once (:func:`obliviate.methods.engine.make_reference`); implies ``needs_reference``;
- ``fit(model, tokenizer)``: fitted on the frozen model before training (e.g. probe directions);
- ``setup(model, ref, forget_batch)``: one-off state before step 0;
- ``scorer_state() -> dict`` / ``load_scorer_state(dict)``: learned state beside the weights, kept in
  checkpoints (both or neither);
- ``token_scores(model, batch)``: per-token importance (ATWU), for reports.

What a method needs is derived from what it declares, never set twice: :func:`check_method_class`
runs at registration and refuses a class that breaks the contract.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from obliviate.errors import ConfigError

DECLARATIONS = {"needs_reference": False, "needs_idk": False, "multiprocess_unsupported": None,
                "sharding_unsupported": None}
"""Optional class attributes and their defaults."""

HOOKS = ("cached_reference_keys", "fit", "setup", "scorer_state", "load_scorer_state", "token_scores")
"""Optional methods a training method may implement."""


@runtime_checkable
class TrainingMethod(Protocol):
    config_cls: type

    def trainable(self, model) -> list[str]: ...

    def loss(self, model, batch: dict, ref) -> dict: ...


class NoReference:
    """What ``ref`` is for a method that did not declare ``needs_reference``: any use is a clear error."""

    def __init__(self, method: str):
        self._method = method

    def __getattr__(self, name):
        raise ConfigError(f"method {self._method!r} uses the reference model (ref.{name}) but does not declare "
                          "needs_reference = True")

    def __bool__(self) -> bool:
        return False


def check_method_class(name: str, cls: type) -> None:
    """Refuse a class that breaks the contract (at registration, i.e. at import time)."""
    kind = getattr(cls, "kind", "train")
    if kind not in ("train", "edit"):
        raise ConfigError(f"method {name!r}: kind must be 'train' or 'edit', got {kind!r}")
    need = ("edit",) if kind == "edit" else ("trainable", "loss")
    missing = [h for h in need if not callable(getattr(cls, h, None))]
    if not hasattr(cls, "config_cls"):
        missing.append("config_cls")
    if missing:
        raise ConfigError(f"method {name!r} ({kind}) lacks {', '.join(missing)}")
    for attr, default in DECLARATIONS.items():
        if not hasattr(cls, attr):
            setattr(cls, attr, default)
    if hasattr(cls, "cached_reference_keys") and not cls.needs_reference:
        raise ConfigError(f"method {name!r} has cached_reference_keys but needs_reference is False")
    if hasattr(cls, "scorer_state") != hasattr(cls, "load_scorer_state"):
        raise ConfigError(f"method {name!r}: scorer_state and load_scorer_state go together")
