"""Paper reproductions (``obliviate reproduce NAME``), composed from the package's components.

A recipe is a folder here (``recipes/<name>/``): ``run.py`` (a config dataclass and the experiments,
``run(cfg, out, progress) -> dict``, registered with :func:`recipe`), ``claims.py`` (the paper's claims
and our verdicts) and ``report.py`` (``render(results, out)``: ``report.md`` and the plots). Claims and
report are pure functions of ``results.json``, so ``obliviate reproduce NAME --render-only DIR``
re-renders a report without training (:func:`render_only`); a run renders from the JSON-clean results
it then writes (:func:`as_results`), so both give the same bytes. A run writes, in its directory,
``results.json`` (atomically, last), ``report.md`` (tables, the paper's claims beside ours) and its
plots. Recipes hold no method code: every objective, metric and attack they use lives in the package.

The claims table is the same in every recipe: :class:`Claim` rows rendered by
:func:`claims_markdown`, one sentence per claim saying whether our small-scale result agrees,
with our number in it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Callable

RECIPE_MODULES = {
    "function-specific": "function_specific",
    "atwu": "atwu",
    "ember": "ember",
    "token-filtering": "token_filtering",
}
"""Recipe name -> module in :mod:`obliviate.recipes` (imported on demand)."""

_RECIPES: dict[str, tuple[type, Callable, str]] = {}
_RENDERERS: dict[str, Callable] = {}


def cached_part(path, key, fn: Callable[[], dict]) -> tuple[dict, float]:
    """``fn()``'s result, stored in the JSON file ``path`` with the ``key`` (settings) that made it and
    reused while the key matches (a part made with other settings is computed again and replaced).

    Returns (the result as read back from the file, the seconds it took when it was computed): a
    rerun sees the same JSON-clean values as the first run.
    """
    import json
    import time
    from pathlib import Path

    from obliviate.runs.results import atomic_write_json

    path = Path(path)
    key = json.loads(json.dumps(key))
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved["result"], saved.get("seconds", 0.0)
    t = time.time()
    result = fn()
    atomic_write_json(path, {"key": key, "result": result, "seconds": time.time() - t})
    saved = json.loads(path.read_text())
    return saved["result"], saved["seconds"]


def recipe(name: str, config_cls: type, description: str, render: Callable):
    """Register ``run(cfg, out, progress)`` as recipe ``name`` with its config dataclass; ``render(results, out)``
    writes the report and plots from ``results.json`` alone (``--render-only``)."""

    def deco(fn):
        _RECIPES[name] = (config_cls, fn, description)
        _RENDERERS[name] = render
        return fn

    return deco


def as_results(cfg, **parts) -> dict:
    """What ``results.json`` will hold (config as a dict, and ``parts``), JSON-cleaned as it is written, so that a
    report rendered from it during the run is the one ``--render-only`` renders from the file."""
    import dataclasses
    import json

    from obliviate.runs.results import _clean

    payload = {"seed": cfg.seed, "config": dataclasses.asdict(cfg), **parts}
    return json.loads(json.dumps(_clean(payload), sort_keys=True))  # as atomic_write_json writes it


def render_only(name: str, out) -> None:
    """Re-render recipe ``name``'s ``report.md`` (and plots) in ``out`` from ``out/results.json``, training nothing."""
    import json
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from obliviate.errors import ConfigError, InvalidResult

    get_recipe(name)
    path = Path(out) / "results.json"
    if not path.is_file():
        raise ConfigError(f"--render-only {out}: no results.json there")
    try:
        results = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidResult(f"{path}: not a readable results.json ({e})") from None
    if results.get("status") != "complete":
        raise InvalidResult(f"{path}: status is {results.get('status')!r}, not 'complete'; nothing to render")
    # Rendered beside the results first and moved in only when all of it rendered: a results.json the
    # renderer cannot read (another recipe's, or an older obliviate's that stored less) overwrites nothing.
    staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out))
    try:
        try:
            _RENDERERS[name](results, staging)
        except KeyError as e:
            raise InvalidResult(f"{path}: no {e.args[0]!r} in it, which the {name} report needs (a results.json "
                                f"of another recipe, or one made before obliviate stored it: rerun the recipe)") from None
        for f in sorted(staging.iterdir()):
            os.replace(f, Path(out) / f.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def available() -> list[str]:
    """Names of the recipes whose module is present."""
    names = []
    for name, mod in RECIPE_MODULES.items():
        if importlib.util.find_spec(f"obliviate.recipes.{mod}") is not None:
            names.append(name)
    return names


def get_recipe(name: str) -> tuple[type, Callable, str]:
    """(config class, run function, description) of recipe ``name``; a clear error for an unknown one."""
    from obliviate.errors import ConfigError

    if name not in RECIPE_MODULES or name not in available():
        raise ConfigError(f"unknown recipe '{name}' (available: {', '.join(available()) or 'none'})")
    importlib.import_module(f"obliviate.recipes.{RECIPE_MODULES[name]}")
    return _RECIPES[name]


@dataclass
class Claim:
    """One claim of a paper next to our measurement."""

    claim: str
    """What the paper says, with its numbers."""
    ours: str
    """Our measurement, with the number."""
    agrees: bool | None
    """True / False, or None when our setting cannot test it."""
    sentence: str
    """One sentence saying whether, and why, our result agrees."""

    def verdict(self) -> str:
        return {True: "agrees", False: "disagrees", None: "not testable here"}[self.agrees]


def claims_markdown(claims: list[Claim]) -> str:
    """The claims table and one sentence per claim, as Markdown."""
    lines = ["| paper's claim | ours | verdict |", "|---|---|---|"]
    lines += [f"| {c.claim} | {c.ours} | {c.verdict()} |" for c in claims]
    lines.append("")
    lines += [f"- {c.sentence}" for c in claims]
    return "\n".join(lines) + "\n"


def claims_json(claims: list[Claim]) -> list[dict]:
    return [{"claim": c.claim, "ours": c.ours, "verdict": c.verdict(), "sentence": c.sentence} for c in claims]


def markdown_table(rows: list[dict], columns: list[str], fmt: str = "{:.3f}") -> str:
    """:func:`obliviate.runs.report.markdown_table` with missing cells shown as '–', ending in a newline."""
    from obliviate.runs.report import markdown_table as table

    return table(rows, columns, fmt, missing="–") + "\n"


def write_report(out, title: str, command: str, sections: list[tuple[str, str]], claims: list[Claim],
                 seconds: float | None = None) -> None:
    """``out/report.md``: title, the command that made it, its run time, each (heading, body), the claims."""
    from pathlib import Path

    from obliviate.runs.results import atomic_write_text

    parts = [f"# {title}\n", f"Made by: `{command}`" + (f" in {seconds / 60:.1f} min" if seconds else "") + "\n"]
    for heading, body in sections:
        parts.append(f"## {heading}\n\n{body}")
    parts.append("## The paper's claims, and ours\n\n" + claims_markdown(claims))
    atomic_write_text(Path(out) / "report.md", "\n".join(parts))
