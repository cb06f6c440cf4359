"""The run of ``obliviate verdict-check`` (:mod:`obliviate.cli.verdict_check`): the verdict's own error rates
simulated around a finished comparison's true rates (:mod:`obliviate.evidence.verdict_check`), written to
``OUT/verdict_check.json``, ``verdict_check.md`` and ``power.png``, then ``results.json`` last."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from obliviate.errors import DataError
from obliviate.evidence.verdict import DEFAULT_ITEMS, reads
from obliviate.evidence.verdict_check import plot_power, references, report_markdown, verdict_check
from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results
from obliviate.utils import atomic_write_text, note_input

log = logging.getLogger(__name__)

FILES = ("verdict_check.json", "verdict_check.md", "power.png")
"""What a run writes in its ``--out``, before ``results.json``."""


@dataclass
class Template:
    """A comparison read from a results file: its metrics (``{model: metrics}``), the item count of the reads
    that record none (None: the rule's default), the file and what kind of run wrote it."""

    metrics: dict
    items: int | None
    path: str
    kind: str


def _whole(x) -> int | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 1:
        return None
    return int(x)


def comparison_items(data: dict, metrics: dict) -> int | None:
    """The item count the comparison's rule read for reads that record none: the base model's forget items
    (``forget_items``) up to the attacks' ``max_eval``, else the oracle band's ``items`` as an older
    results.json wrote it (one count for every attack), else None."""
    config = data.get("config")
    attacks = config.get("attacks") if isinstance(config, dict) else None
    cap = _whole(attacks.get("max_eval")) if isinstance(attacks, dict) else None
    n = _whole((metrics.get("base") or {}).get("forget_items"))
    if n is not None:
        return min(n, cap) if cap else n
    robustness = data.get("robustness")
    band = robustness.get("band") if isinstance(robustness, dict) else None
    counts = ([_whole(b.get("items")) for b in band.values() if isinstance(b, dict)] if isinstance(band, dict)
              else [])
    counts = [c for c in counts if c is not None]
    return max(counts) if counts else None


def load_template(path: str, items: int | None = None) -> Template:
    """The comparison in results file ``path`` (``obliviate compare`` / ``demo``: ``metrics`` holds the
    base model, the oracle and the positive controls; ``obliviate attack --base``: ``reference_metrics``
    and the negative control), checked as the simulation reads it; ``items`` overrides
    :func:`comparison_items`. Every fault is one DataError naming the file: missing, unreadable, not JSON,
    an unfinished run, no comparison."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "results.json"
    if not p.exists():
        raise DataError(f"results file not found: {p}")
    if not p.is_file():
        raise DataError(f"results file {p} is not a regular file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"results file {p} cannot be read: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"results file {p} is not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict):
        raise DataError(f"results file {p} is not a results.json (a "
                        f"JSON object), got a {type(data).__name__}")
    status = data.get("status", "complete")
    if status != "complete":
        why = f": {data['error']}" if data.get("error") else ""
        raise DataError(f"results file {p} records a run that did not finish (status {status!r}{why}), so it "
                        "holds no metrics to simulate from")
    metrics = data.get("metrics")
    if not isinstance(metrics, dict):
        raise DataError(f"results file {p} has no metrics (an object of each model's metrics)")
    if "oracle" in metrics and "base" in metrics:
        template, kind = metrics, "comparison"
    elif isinstance(metrics.get("negative_control"),
                    dict) and isinstance(data.get("reference_metrics"), dict):
        template, kind = {**data["reference_metrics"], "oracle": metrics["negative_control"]}, "attack"
    elif isinstance(metrics.get("negative_control"), dict) or "negative_control" in metrics:
        raise DataError(f"results file {p} is an `obliviate attack` run without --base: it holds no base "
                        "model or positive controls, which every verdict reads")
    else:
        raise DataError(f"results file {p} holds no comparison: its metrics have no base model and oracle "
                        "(an `obliviate compare` or `demo` run, or `obliviate attack --base`)")
    try:
        references(template)
    except DataError as e:
        raise DataError(f"results file {p}: {e}") from None
    note_input(p)
    return Template(template, items if items is not None else comparison_items(data, template), str(p), kind)


def run_verdict_check(template: Template, out, *, trials: int = 1000, seed: int = 0,
                      progress: bool = False) -> tuple[dict, str]:
    """Simulate the rule's error rates on ``template``
    (:func:`~obliviate.evidence.verdict_check.verdict_check`), write :data:`FILES` and ``results.json`` in
    ``out``; returns the report and its Markdown."""
    oracle = template.metrics["oracle"]
    unrecorded = [r.name for r in reads().values()
                  if oracle.get(r.after) is not None and f"{r.name}_items" not in oracle]
    if unrecorded:
        log.info(f"{', '.join(unrecorded)}: no item count or variants recorded (results written before issue "
                 f"#57): {template.items or DEFAULT_ITEMS} items and one variant assumed"
                 + ("" if template.items else " (the rule's default)"))
    out = prepare_out_dir(out)
    log.info(f"simulating {trials} comparisons per scenario around {template.path} (seed {seed})")
    with tqdm(total=0, desc="verdict-check", disable=not progress, leave=False, unit="trial") as bar:
        def total(n: int) -> None:
            bar.total = n
            bar.refresh()

        report = verdict_check(template.metrics, trials, seed, template.items, progress=bar.update,
                               on_total=total)
    report["source"] = {"results": template.path, "kind": template.kind}
    md = report_markdown(report, source=template.path)
    atomic_write_json(out / "verdict_check.json", report)
    atomic_write_text(out / "verdict_check.md", "# The rule's own error rates "
                                                "(obliviate verdict-check)\n\n" + md)
    plot_power(report, out / "power.png")
    write_results(out, seed=seed, config={"trials": trials, "seed": seed, "items": template.items,
                                          "results": template.path},
                  metrics={"bounds": report["bounds"], "power": report["power"]}, inputs=[template.path])
    return report, md
