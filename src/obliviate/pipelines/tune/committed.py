"""The settings tuned for each method on the world, one committed file per method beside the methods:
``obliviate/methods/tuned/<method>.yaml`` (written by ``scripts/tune_all.py``, read by ``compare --tuned``).

Each file holds ``tuned_for`` (the task, world seed, preset, base model and budget it was tuned on),
``choice`` (the chosen trial's validation scores, and whether it met the keep constraint or is the best
trade-off: :func:`~obliviate.pipelines.tune.run.choose`) and ``unlearn`` (the run's settings:
``params``, ``batch_size``, ``train.lr``, ``train.steps``, the keys of ``runs.<method>``). A file is read for a
model of the preset it was tuned for only; a method without one runs at its preset, and the comparison says
so (docs/methods.md, "Tuning a method for your model").
"""

from __future__ import annotations

from pathlib import Path

import yaml

import obliviate.methods as _methods
from obliviate.config import deep_merge
from obliviate.errors import ConfigError
from obliviate.pipelines.tune.run import SELECTION_RULE, keep_text, setting_text
from obliviate.runs.results import atomic_write_text

TUNED_DIR = Path(_methods.__file__).parent / "tuned"
"""Where the committed tuned settings live: one ``<method>.yaml`` per method."""

_RUN_KEYS = ("params", "batch_size", "train")


def tuned_path(name: str, root: str | Path | None = None) -> Path:
    return Path(root or TUNED_DIR) / f"{name}.yaml"


def write_method_tuning(name: str, result: dict, tuned_for: dict, root: str | Path | None = None) -> Path:
    """Method ``name``'s tuning ``result`` (:func:`~obliviate.pipelines.tune.run.tune`) as its committed file,
    written whole or not at all; ``tuned_for`` says on what (``task``, ``seed``, ``preset``, ``base``)."""
    c = result["chosen"]
    unlearn = _tidy({k: v for k, v in result["settings"]["unlearn"].items() if k in _RUN_KEYS})
    doc = {"tuned_for": {**tuned_for, "budget": result["budget"], "trials": len(result["trials"]),
                         "retain_share": result["retain_share"],
                         "space": {k: list(v) for k, v in result["space"].items()}},
           "choice": {"trial": c["index"] + 1, "meets_constraint": bool(result["feasible"]),
                      "forget_removed": c["forgot"], "forget_score": c.get("forget_score"),
                      "retain_score": c.get("retain_score"), "neighbour_score": c.get("neighbour_score"),
                      "keep": dict(c["keep"]), "scales": dict(zip(result["space"], c["scales"]))},
           "unlearn": unlearn}
    head = (f"# {name}: tuned by scripts/tune_all.py on {tuned_for.get('task')} seed {tuned_for.get('seed')} "
            f"({tuned_for.get('preset')} preset), trial {c['index'] + 1} of {len(result['trials'])}: "
            f"{setting_text(c)}; validation: forget removed {c['forgot'] or 0.0:.3f}, {keep_text(c)}"
            + ("" if result["feasible"] else "; no trial met the keep constraint: the best trade-off") + ".\n"
            f"# Rule: {SELECTION_RULE.format(share=result['retain_share'])}.\n")
    path = tuned_path(name, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, head + yaml.safe_dump(doc, sort_keys=False))
    return path


def _tidy(x):
    """``x`` with each float at 12 significant digits (a factor times a preset: ``9e-05``, not
    ``8.999999999999999e-05``; the difference is below any training step's effect)."""
    if isinstance(x, dict):
        return {k: _tidy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_tidy(v) for v in x]
    return float(f"{x:.12g}") if isinstance(x, float) else x


def read_method_tuning(name: str, root: str | Path | None = None) -> dict | None:
    """Method ``name``'s committed tuning (:func:`write_method_tuning`'s document), None where it has none; a
    file that is not one is a one-line error naming it."""
    path = tuned_path(name, root)
    if not path.is_file():
        return None
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: not readable as YAML ({type(e).__name__})") from None
    run = doc.get("unlearn") if isinstance(doc, dict) else None
    train = run.get("train") if isinstance(run, dict) else None
    ok = (isinstance(run, dict) and set(run) <= set(_RUN_KEYS) and isinstance(train, dict)
          and isinstance(doc.get("tuned_for"), dict) and isinstance(doc["tuned_for"].get("preset"), str)
          and isinstance(doc.get("choice"), dict))
    if not ok:
        raise ConfigError(f"{path}: not a tuned-settings file (tuned_for with its preset, choice, and unlearn "
                          f"with {', '.join(_RUN_KEYS)})")
    return doc


def tuned_run(name: str, preset: str, given: dict | None, root: str | Path | None = None) -> tuple[dict, dict]:
    """``(run settings, source)``: method ``name``'s committed tuned settings for a model of ``preset``, under
    ``given`` (the user's ``runs.<name>``, which wins key by key), and where they came from: ``{"from": path,
    "tuned_for", "choice"}``, or ``{"from": "preset", "why"}`` where the method has no file or one tuned for
    another preset (it then runs at its preset, as without ``--tuned``)."""
    doc = read_method_tuning(name, root)
    if doc is None:
        return dict(given or {}), {"from": "preset", "why": f"no tuned settings ({tuned_path(name, root).name})"}
    if doc["tuned_for"]["preset"] != preset:
        return dict(given or {}), {"from": "preset", "why": f"tuned for the {doc['tuned_for']['preset']!r} "
                                                            f"preset; this model takes {preset!r}"}
    return (deep_merge(doc["unlearn"], given or {}),
            {"from": str(tuned_path(name, root)), "tuned_for": doc["tuned_for"], "choice": doc["choice"]})
