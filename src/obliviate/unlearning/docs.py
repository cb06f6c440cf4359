"""The tables of docs/methods.md, generated from the registry: what each registered method declares.

``make docs`` (``python -m obliviate.unlearning.docs docs/methods.md``) rewrites the block between
:data:`BEGIN` and :data:`END`; ``tests/methods/test_docs.py`` fails when the file is stale, so a new
method file shows up in the docs by running one command, and a changed default cannot go unnoticed.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from obliviate.errors import ConfigError
from obliviate.unlearning.contract import METHODS, build_method, method_names

BEGIN = "<!-- BEGIN generated from the method registry by `make docs`; do not edit by hand -->"
END = "<!-- END generated -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _value(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str):
        return repr(v)
    return str(v)


def config_defaults(cls) -> str:
    """``key=value`` of every field of the method's config dataclass, in declaration order."""
    out = []
    for f in dataclasses.fields(cls.config_cls):
        if f.default is not dataclasses.MISSING:
            out.append(f"{f.name}={_value(f.default)}")
        elif f.default_factory is not dataclasses.MISSING:
            out.append(f"{f.name}={_value(f.default_factory())}")
        else:
            out.append(f"{f.name} (required)")
    return ", ".join(out) or "—"


def preset_text(preset: dict) -> str:
    params = ", ".join(f"{k}={_value(v)}" for k, v in preset.get("params", {}).items())
    return f"lr {preset['lr']:g}, {preset['steps']} steps" + (f"; {params}" if params else "")


def needs(name: str) -> str:
    """What the method needs and where it cannot run, read from its declarations with its default config."""
    method = build_method(name)
    out = []
    if method.kind == "edit":
        out.append("edit (no training loop)")
    if method.needs_reference:
        out.append("reference")
    if method.needs_idk:
        out.append(method.preferred)
    if method.multiprocess_unsupported:
        out.append("one process")
    elif method.sharding_unsupported:
        out.append("no sharding")
    return ", ".join(out) or "—"


UNSTATED_SCALING = ("size class tiny/paper; lr: × the fine-tuning run's lr over its preset's (every training "
                    "method, `obliviate unlearn`); its own settings fixed")
"""What the scaling table says for a method whose class sets no ``scaling`` of its own."""


def scaling(name: str) -> str:
    """How method ``name``'s preset scales with the model: its class's own ``scaling`` (a subclass does not
    inherit its parent's), else :data:`UNSTATED_SCALING`; an edit method has no training preset."""
    cls = METHODS[name]
    own = cls.__dict__.get("scaling")
    if own:
        return own
    return "edit: its own settings, no lr or steps" if cls.kind == "edit" else UNSTATED_SCALING


def search_text(name: str) -> str:
    """Method ``name``'s search space (``search`` at its ``@register``) in one cell: ``lr × 0.3, 1, 3; ...``
    and the number of settings it holds."""
    cls = METHODS[name]
    if cls.kind == "edit":
        return "edit: none (no lr or steps)"
    if not cls.search:
        return "none documented"
    n = 1
    for v in cls.search.values():
        n *= len(v)
    return "; ".join(f"{k} × {', '.join(f'{x:g}' for x in v)}" for k, v in cls.search.items()) + f" ({n} settings)"


def render() -> str:
    """The generated block (markers included)."""
    names = method_names()
    rows = ["| name | objective | trains | needs | source |", "|---|---|---|---|---|"]
    for n in names:
        c = METHODS[n]
        rows.append(f"| `{n}` | {_cell(c.equation or '—')} | {_cell(c.trains)} | {_cell(needs(n))} | "
                    f"{_cell(c.paper or '—')} |")
    rows += ["", "| name | `tiny` preset | `paper` preset | config defaults (`unlearn.params.KEY`) |",
             "|---|---|---|---|"]
    for n in names:
        c = METHODS[n]
        rows.append(f"| `{n}` | {_cell(preset_text(c.presets['tiny']))} | "
                    f"{_cell(preset_text(c.presets['paper']))} | {_cell(config_defaults(c))} |")
    rows += ["", "| name | how the preset scales with the model (why: below the tables) |", "|---|---|"]
    rows += [f"| `{n}` | {_cell(scaling(n))} |" for n in names]
    rows += ["", "| name | search space of `tune` and `compare --tune` (factors of the run as given) |", "|---|---|"]
    rows += [f"| `{n}` | {_cell(search_text(n))} |" for n in names]
    return "\n".join([BEGIN, "", *rows, "", END])


def current_block(text: str, path: str | Path = "docs/methods.md") -> tuple[int, int]:
    """``(start, end)`` offsets of the generated block in ``text`` (end just after :data:`END`)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ConfigError(f"{path}: no generated block (a line {BEGIN!r} ... {END!r}) to rewrite")
    return start, end + len(END)


def update(path: str | Path) -> bool:
    """Rewrite the generated block of ``path``; True if it changed."""
    path = Path(path)
    text = path.read_text()
    start, end = current_block(text, path)
    new = text[:start] + render() + text[end:]
    if new != text:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "docs/methods.md"
    print(f"{target}: {'rewritten' if update(target) else 'up to date'}")
