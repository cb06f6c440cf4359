"""Paper reproductions (``obliviate reproduce NAME``), composed from the package's components and pipelines.

A recipe is a folder ``papers/<name>/``: ``run.py`` (a config dataclass and ``run(cfg, out, progress) ->
dict``, registered with :func:`recipe`), ``claims.py`` (:class:`Claim` rows, rendered by
:func:`claims_markdown`) and ``report.py`` (``render(results, out)``), pure functions of ``results.json``, so
``--render-only`` re-renders a report without training (:func:`render_only`; a run renders from
:func:`as_results`, the same bytes). Recipes hold no method code. docs/recipes.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from obliviate.errors import ConfigError, InvalidResult
from obliviate.registry import Registry
from obliviate.runs.report import markdown_table as _markdown_table
from obliviate.runs.results import _clean, atomic_write_text, prepare_out_dir


class Recipe(NamedTuple):
    """A registered recipe: its config dataclass, ``run(cfg, out, progress)``, a one-line description and
    ``render(results, out)``."""

    config: type
    run: Callable
    description: str
    render: Callable


RECIPES = Registry("recipe", package="obliviate.papers")
"""Recipe name -> :class:`Recipe`, filled by :func:`recipe` when a recipe folder is imported (the first
look-up imports every module of :mod:`obliviate.papers`; a recipe folder's ``__init__`` imports its
``run.py``)."""


def recipe(name: str, config_cls: type, description: str, render: Callable):
    """Register ``run(cfg, out, progress)`` as recipe ``name`` with its config dataclass; ``render(results,
    out)`` writes the report and plots from ``results.json`` alone (``--render-only``)."""

    def deco(fn):
        RECIPES.add(name, Recipe(config_cls, fn, description, render))
        return fn

    return deco


def as_results(cfg, **parts) -> dict:
    """What ``results.json`` will hold (config as a dict, and ``parts``), JSON-cleaned as it is written, so
    that a report rendered from it during the run is the one ``--render-only`` renders from the file."""
    payload = {"seed": cfg.seed, "config": dataclasses.asdict(cfg), **parts}
    return json.loads(json.dumps(_clean(payload), sort_keys=True))  # as atomic_write_json writes it


def render_only(name: str, out) -> None:
    """Re-render recipe ``name``'s ``report.md`` (and plots) in ``out`` from ``out/results.json``, training
    nothing."""
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
            RECIPES[name].render(results, staging)
        except KeyError as e:
            raise InvalidResult(f"{path}: no {e.args[0]!r} in it, which the {name} report needs (a "
                                "results.json of another recipe, or one made before "
                                "obliviate stored it: rerun the recipe)") from None
        for f in sorted(staging.iterdir()):
            os.replace(f, Path(out) / f.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def available() -> list[str]:
    """Names of the registered recipes."""
    return RECIPES.names()


def get_recipe(name: str) -> tuple[type, Callable, str]:
    """(config class, run function, description) of recipe ``name``; one error line for an unknown one."""
    entry = RECIPES.lookup(name)
    return entry.config, entry.run, entry.description


def run_recipe(name: str, cfg, out, progress: bool = True) -> Path:
    """Run recipe ``name`` with ``cfg`` in the run directory ``out`` (prepared here); returns it."""
    out = prepare_out_dir(out)
    get_recipe(name)[1](cfg, out, progress=progress)
    return out


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

    def agreement(self) -> str:
        """``agrees``, ``disagrees`` or ``not testable here`` (a claim's word; "verdict" is the attacks' rule
        alone)."""
        return {True: "agrees", False: "disagrees", None: "not testable here"}[self.agrees]


def claims_markdown(claims: list[Claim]) -> str:
    """The claims table and one sentence per claim, as Markdown."""
    lines = ["| paper's claim | ours | agreement |", "|---|---|---|"]
    lines += [f"| {c.claim} | {c.ours} | {c.agreement()} |" for c in claims]
    lines.append("")
    lines += [f"- {c.sentence}" for c in claims]
    return "\n".join(lines) + "\n"


def claims_json(claims: list[Claim]) -> list[dict]:
    return [{"claim": c.claim, "ours": c.ours, "agreement": c.agreement(),
             "sentence": c.sentence} for c in claims]


def markdown_table(rows: list[dict], columns: list[str], fmt: str = "{:.3f}") -> str:
    """:func:`obliviate.runs.report.markdown_table` with missing cells shown as '–', ending in a newline."""
    return _markdown_table(rows, columns, fmt, missing="–") + "\n"


def write_report(out, title: str, command: str, sections: list[tuple[str, str]], claims: list[Claim],
                 seconds: float | None = None) -> None:
    """``out/report.md``: title, the command that made it, its run time, each (heading, body), the claims."""
    parts = [f"# {title}\n", "Made by: "
                             f"`{command}`" + (f" in {seconds / 60:.1f} min" if seconds else "") + "\n"]
    for heading, body in sections:
        parts.append(f"## {heading}\n\n{body}")
    parts.append("## The paper's claims, and ours\n\n" + claims_markdown(claims))
    atomic_write_text(Path(out) / "report.md", "\n".join(parts))
