"""Unlearning methods: one file each, registered by decorator.

A *training* method is a class with

- ``config_cls``: its config dataclass (defaults documented there);
- ``needs_reference``: whether it reads a frozen reference model;
- ``trainable(model) -> list[str]``: fnmatch patterns of the parameters it trains;
- ``setup(model, ref, forget_batch)`` (optional): one-off state before step 0;
- ``loss(model, batch, ref) -> {name: tensor}``: the named, already-weighted
  loss terms for one paired batch ``{"forget": ..., "retain": ...}``.

An *edit* method has ``kind = "edit"`` and ``edit(model, tokenizer, data) -> dict``
instead of ``loss``; it runs without the training loop.

Optional: ``multiprocess_unsupported`` / ``sharding_unsupported`` (attributes or
properties), the reason the method cannot run in several processes / on a sharded
model, or None; :func:`obliviate.train.distributed.check_method` turns them into a
start-up error (docs/distributed.md).

The training loop (:mod:`obliviate.train`) sums the terms and logs each one.
Adding a method = adding one file here; the registry test covers it.
"""

from __future__ import annotations

import importlib
import pkgutil

from obliviate.errors import ConfigError

METHODS: dict[str, type] = {}


def register(name: str):
    """Class decorator: make a method available as ``name``."""

    def deco(cls):
        if name in METHODS and METHODS[name] is not cls:
            raise RuntimeError(f"method {name!r} registered twice")
        cls.name = name
        cls.kind = getattr(cls, "kind", "train")
        METHODS[name] = cls
        return cls

    return deco


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


def method_names() -> list[str]:
    _load_all()
    return sorted(METHODS)


def get_method(name: str) -> type:
    _load_all()
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def build_method(name: str, overrides: dict | None = None, model=None):
    """Instantiate method ``name`` with its config from defaults plus ``overrides``."""
    from obliviate.config import from_dict

    cls = get_method(name)
    cfg = from_dict(cls.config_cls, overrides or {}, prefix=f"method.{name}")
    return cls(cfg)
