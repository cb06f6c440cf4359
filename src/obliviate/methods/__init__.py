"""Unlearning methods by name: one file per method, each registered with :func:`register`.

A method is one file here: a config dataclass and a :class:`~obliviate.unlearning.contract.Method` subclass
(the contract), registered with its paper, objective and presets. The first look-up imports every module of
this package, so adding a method is adding its file (docs/methods.md). The registry and its look-ups live in
:mod:`obliviate.unlearning.contract`; they are named here too, where methods and users import them.
"""

from obliviate.unlearning.contract import (DEFAULT_PRESETS, METHODS, PRESET_THRESHOLD, PRESETS, Method,
                                           build_method, get_method, method_defaults, method_names,
                                           preset_name,
                                           register, resolve_method)

__all__ = ["DEFAULT_PRESETS", "METHODS", "PRESETS", "PRESET_THRESHOLD", "Method", "build_method",
           "get_method",
           "method_defaults", "method_names", "preset_name", "register", "resolve_method"]
