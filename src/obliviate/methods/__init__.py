"""Unlearning methods by name: :data:`METHODS`, filled by :func:`register` at each method's file.

A method is one file here: a config dataclass and a :class:`~obliviate.methods.contract.Method`
subclass (the contract), registered with its paper, objective and presets. The first look-up imports
every module of this package, so adding a method is adding its file (docs/methods.md).
"""

from __future__ import annotations

import copy
import dataclasses

from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.methods.contract import Method, check_method_class
from obliviate.registry import Registry

METHODS = Registry("method", package=__name__)
"""``name -> Method subclass``."""

PRESETS = ("tiny", "paper")
"""Every method has these two presets (:func:`method_defaults`):

- ``"tiny"``: for the models obliviate trains itself (the world and TOFU models, under ~100M
  parameters); tuned on world seed 0 (docs/results.md);
- ``"paper"``: the paper's settings, for billion-parameter models.
"""

DEFAULT_PRESETS: dict[str, dict] = {
    "tiny": {"lr": 1e-3, "steps": 50, "params": {}},
    "paper": {"lr": 1e-5, "steps": 125, "params": {}},
}
"""What :func:`register` gives a method for a preset it does not name (and for a key a preset
leaves out). ``paper``: lr 1e-5 for 125 steps, the usual TOFU fine-tuning setting (10 epochs of
the 400 forget10 pairs at batch 32, as in open-unlearning)."""

PRESET_THRESHOLD = 100_000_000
"""Models with fewer parameters than this get the ``"tiny"`` preset (:func:`preset_name`)."""


def _check_presets(name: str, cls: type, presets: dict | None) -> dict[str, dict]:
    """``presets`` completed from :data:`DEFAULT_PRESETS` and checked against ``cls.config_cls``."""
    presets = copy.deepcopy(presets or {})
    where = f"method {name!r}"
    unknown = sorted(set(presets) - set(PRESETS))
    if unknown:
        raise ConfigError(f"{where}: unknown preset {unknown[0]!r} (valid: {', '.join(PRESETS)})")
    config_cls = getattr(cls, "config_cls", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        raise ConfigError(f"{where}: config_cls must be a dataclass, got {config_cls!r}")
    fields = {f.name for f in dataclasses.fields(config_cls)}
    out = {}
    for preset in PRESETS:
        p = presets.get(preset, {})
        if not isinstance(p, dict):
            raise ConfigError(f"{where}, preset {preset!r}: must be a dict of lr, steps, params, got {p!r}")
        bad = sorted(set(p) - {"lr", "steps", "params"})
        if bad:
            raise ConfigError(f"{where}, preset {preset!r}: unknown key {bad[0]!r} (valid: lr, steps, params)")
        full = {**copy.deepcopy(DEFAULT_PRESETS[preset]), **p}
        lr, steps, params = full["lr"], full["steps"], full["params"]
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ConfigError(f"{where}, preset {preset!r}: lr must be a number > 0, got {lr!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"{where}, preset {preset!r}: steps must be an integer >= 1, got {steps!r}")
        if not isinstance(params, dict):
            raise ConfigError(f"{where}, preset {preset!r}: params must be a dict, got {params!r}")
        extra = sorted(set(params) - fields)
        if extra:
            raise ConfigError(f"{where}, preset {preset!r}: {extra[0]!r} is not a field of "
                              f"{config_cls.__name__} (fields: {', '.join(sorted(fields))})")
        out[preset] = {"lr": float(lr), "steps": steps, "params": params}
    return out


def register(name: str, *, paper: str = "", equation: str = "", trains: str = "all parameters",
             presets: dict | None = None):
    """Class decorator: make a method available as ``name``.

    ``paper``: the method's source (shown by ``obliviate methods -v``). ``equation``: its objective in
    one line (forget term; retain term), and ``trains``: which parameters it changes, both shown in
    the generated table of docs/methods.md (:mod:`obliviate.methods._docs`). ``presets`` maps a
    preset name (:data:`PRESETS`) to ``{"lr": float, "steps": int, "params": {...}}``, where
    ``params`` override fields of the method's config dataclass. A preset (or a key of one)
    that is not given comes from :data:`DEFAULT_PRESETS`, so a new method needs nothing but
    its own file. Presets are checked here, at import time: a ``params`` key that is not a
    field of ``config_cls`` raises :class:`~obliviate.errors.ConfigError`.
    """

    def deco(cls):
        if dict.get(METHODS, name, cls) is not cls:
            raise RuntimeError(f"method {name!r} registered twice")
        check_method_class(name, cls)
        cls.name = name
        cls.paper = paper
        cls.equation = equation
        cls.trains = trains
        cls.presets = _check_presets(name, cls, presets)
        return METHODS.add(name, cls)

    return deco


def method_names() -> list[str]:
    return METHODS.names()


def get_method(name: str) -> type[Method]:
    """The method class called ``name``, or one error line naming it and the known methods."""
    return METHODS.lookup(name)


def method_defaults(name: str, preset: str) -> dict:
    """A copy of method ``name``'s run defaults for ``preset``: ``{"lr", "steps", "params"}``."""
    cls = get_method(name)
    if preset not in cls.presets:
        raise ConfigError(f"unknown preset {preset!r} of method {name!r} (valid: {', '.join(cls.presets)})")
    return copy.deepcopy(cls.presets[preset])


def preset_name(model_or_param_count) -> str:
    """``"tiny"`` for a model (or a parameter count) under :data:`PRESET_THRESHOLD` (100M), else ``"paper"``.

    A model's count is its total number of parameters, embeddings included and tied weights
    counted once (``model.parameters()``). Every model obliviate trains itself is far below
    100M (the world's are a few million); the papers' models are 1B and up.
    """
    n = model_or_param_count
    if not isinstance(n, int) or isinstance(n, bool):
        if not hasattr(n, "parameters"):
            raise ConfigError(f"preset_name: expected a model or a parameter count, got {n!r}")
        n = sum(p.numel() for p in n.parameters())
    if n < 0:
        raise ConfigError(f"preset_name: parameter count must be >= 0, got {n}")
    return "tiny" if n < PRESET_THRESHOLD else "paper"


def build_method(name: str, overrides: dict | None = None, prefix: str | None = None) -> Method:
    """Instantiate method ``name`` with its config from defaults plus ``overrides``; a bad key is named under
    ``prefix``, where the user gave ``overrides`` (``"unlearn.params"``; default ``method.<name>``)."""
    cls = get_method(name)
    cfg = from_dict(cls.config_cls, overrides or {}, prefix=f"method.{name}" if prefix is None else prefix)
    return cls(cfg)
