"""``obliviate methods``: list the registered unlearning methods."""

from __future__ import annotations

import typing

from obliviate.methods import METHODS, build_method, method_names
from obliviate.unlearning.contract import _overrides


def preset_text(preset: dict, kind: str = "train") -> str:
    """``lr=0.001 steps=50 coef=20.0`` (edit methods: only their params)."""
    items = [] if kind == "edit" else [f"lr={preset['lr']:g}", f"steps={preset['steps']}"]
    items += [f"{k}={v}" for k, v in preset["params"].items()]
    return " ".join(items) or "-"


def cmd_methods(args) -> None:
    names = method_names()
    if not getattr(args, "verbose", False):
        for name in names:
            print(name)
        return
    rows = [(n, METHODS[n].kind, METHODS[n].paper or "-",
             preset_text(METHODS[n].presets["tiny"], METHODS[n].kind),
             retain_text(METHODS[n]), reference_text(n)) for n in names]
    w = max(len(n) for n in names)
    for name, kind, paper, tiny, retain, ref in rows:
        print(f"{name:<{w}}  {kind:<5}  tiny: {tiny}{retain}  reference: {ref}  | {paper}")


def reference_text(name: str) -> str:
    """What method ``name`` holds of the frozen model at its defaults
    (:func:`obliviate.unlearning.reference.make_reference`): ``none``; ``cached log-probs`` (per sequence or
    per token, computed once, no model); ``cached hidden states`` (the retain examples' frozen states at the
    layers it reads, computed once, no model); ``cached logits`` (at the labelled positions, computed once, no
    model, unless larger than the copy); ``frozen prefix`` (the layers up to the one it reads); ``frozen
    copy`` (the whole model)."""
    method = build_method(name)
    if METHODS[name].kind == "edit" or not method.needs_reference:
        return "none"
    if _overrides(type(method), "cached_reference_keys") or _overrides(type(method),
                                                                       "cached_token_reference_keys"):
        return "cached log-probs"
    if _overrides(type(method), "cached_hidden_layers"):
        return "cached hidden states"
    if _overrides(type(method), "cached_logit_keys"):
        return "cached logits"
    if _overrides(type(method), "reference_depth"):
        return "frozen prefix"
    return "frozen copy"


def retain_text(method) -> str:
    """`` retain: nll|kl (kl: a live frozen reference)`` for a method whose config has the shared retain
    switch (:func:`obliviate.unlearning.objectives.retain_term`), else ``""``."""
    cfg = getattr(method, "config_cls", None)
    if "retain" not in getattr(cfg, "__dataclass_fields__", {}):
        return ""
    kinds = "|".join(str(c) for c in typing.get_args(typing.get_type_hints(cfg)["retain"])) or "nll|kl"
    return f"  retain: {kinds} (kl: a live frozen reference)" if "kl" in kinds else f"  retain: {kinds}"


def register(sub) -> None:
    s = sub.add_parser("methods", help="list the registered unlearning methods, one per line")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="one line each: name, kind (train | edit), tiny preset (lr, steps, params), the "
                        "retain switch where the method has one (kl holds a live frozen reference), the "
                        "reference it holds (none, cached log-probs, cached hidden states, cached logits, "
                        "frozen prefix or frozen copy) and paper")
    s.set_defaults(fn=cmd_methods)
