"""``obliviate methods``: list the registered unlearning methods."""

from __future__ import annotations

from obliviate.methods import METHODS, method_names


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
    rows = [(n, METHODS[n].kind, METHODS[n].paper or "-", preset_text(METHODS[n].presets["tiny"], METHODS[n].kind))
            for n in names]
    w = max(len(n) for n in names)
    for name, kind, paper, tiny in rows:
        print(f"{name:<{w}}  {kind:<5}  tiny: {tiny}  | {paper}")


def register(sub) -> None:
    s = sub.add_parser("methods", help="list the registered unlearning methods, one per line")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="one line each: name, kind (train | edit), tiny preset (lr, steps, params) and paper")
    s.set_defaults(fn=cmd_methods)
