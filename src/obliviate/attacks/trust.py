"""Which numbers to trust on a task: each metric's and each attack's faithfulness and robustness.

OpenUnlearning's meta-evaluation (Dorna et al. 2025, arXiv 2506.12618), read on the models every comparison
already builds: a read is *faithful* when its separation AUC between the models with the knowledge (:data:`WITH`)
and those without (:data:`WITHOUT`) is far from 0.5 (``separates``), *robust* when quantization and the attacks
move it little on the models without (``stable``, at most :data:`STABLE_MOVE`); ``trusted`` is both, and for an
attack also *calibrated* (the verdict's calibration on the positive controls): an uncalibrated attack is never
trusted, however well it separates.
docs/evaluation.md, "Which numbers to trust".
"""

from __future__ import annotations

from obliviate.attacks.controls import POSITIVE_CONTROLS
from obliviate.attacks.verdict import reads as attack_reads
from obliviate.runs.report import markdown_table

WITH = ("base", *POSITIVE_CONTROLS)
"""The models that hold the forget knowledge."""
WITHOUT = ("oracle", "second_oracle", "filtered")
"""The models that do not (never saw the facts, or saw their tokens loss-masked)."""
SEPARATES_AUC = 0.8
"""A read separates when its AUC is at least this (or at most 1 minus this: the other way round)."""
STABLE_MOVE = 0.1
"""A read is stable when the cheap attacks move it by at most this on the models without the knowledge."""
EXTRA_METRICS = ("probe_acc",)
"""Reads beside the ``forget_*`` metrics and the membership-inference AUCs."""


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def separation_auc(with_: list[float], without: list[float]) -> float | None:
    """P(a model with the knowledge scores above one without) + 1/2 P(tie); None when a group is empty."""
    if not with_ or not without:
        return None
    wins = sum((a > b) + 0.5 * (a == b) for a in with_ for b in without)
    return wins / (len(with_) * len(without))


def metric_keys(metrics: dict) -> list[str]:
    """The forget-side metrics read: every number ``forget_*`` (chance levels aside), each membership-inference AUC
    (``mia_auc_*``, not the control's copy) and :data:`EXTRA_METRICS`, in first-seen order."""
    keys: dict[str, None] = {}
    for m in metrics.values():
        for k, v in m.items():
            if _number(v) and ((k.startswith("forget_") and not k.endswith("_chance"))
                               or (k.startswith("mia_auc_") and not k.endswith("_control")) or k in EXTRA_METRICS):
                keys[k] = None
    return list(keys)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def quantize_move(m: dict, key: str) -> float | None:
    """The largest ``|quantize_<scheme>_<key> - key|`` over the schemes ``m`` was quantized with; None if none."""
    if not _number(m.get(key)):
        return None
    moves = [abs(m[f"quantize_{s}_{key}"] - m[key]) for s in _schemes(m) if _number(m.get(f"quantize_{s}_{key}"))]
    return max(moves) if moves else None


def _schemes(m: dict) -> list[str]:
    """The quantization schemes whose forget score ``m`` holds."""
    return [k[len("quantize_"):-len("_forget_score")] for k in m
            if k.startswith("quantize_") and k.endswith("_forget_score") and k != "quantize_forget_score"]


def _row(name: str, kind: str, key: str, metrics: dict, with_: list[str], without: list[str],
         before: str | None = None, calibrated: bool | None = None) -> dict | None:
    w = [metrics[n][key] for n in with_ if _number(metrics[n].get(key))]
    wo = [metrics[n][key] for n in without if _number(metrics[n].get(key))]
    auc = separation_auc(w, wo)
    if auc is None:
        return None
    row = {"kind": kind, "key": key, "auc": auc, "separates": max(auc, 1 - auc) >= SEPARATES_AUC - 1e-9,
           "with": _mean(w), "without": _mean(wo)}
    moves = {}
    if kind == "metric":
        moves["moves_quantize"] = _mean([x for x in (quantize_move(metrics[n], key) for n in without) if x is not None])
    else:
        moves["lift"] = _mean([metrics[n][key] - metrics[n][before] for n in without
                               if _number(metrics[n].get(key)) and _number(metrics[n].get(before))])
    row.update(moves)
    measured = [abs(v) for v in moves.values() if v is not None]
    row["stable"] = None if not measured else all(v <= STABLE_MOVE + 1e-9 for v in measured)
    row["trusted"] = None if row["stable"] is None else bool(row["separates"] and row["stable"])
    if kind == "attack":
        row["calibrated"] = calibrated
        if row["trusted"] is not None:
            row["trusted"] = bool(row["trusted"] and calibrated)
    return row


def metric_trust(metrics: dict, calibration: dict | None = None) -> dict:
    """``{"groups": {"with", "without"}, "reads": {name: row}}``: a row per forget-side metric
    (:func:`metric_keys`) and per attack of :func:`~obliviate.attacks.verdict.reads` read on at least one model of
    each group, with ``kind`` (``metric`` / ``attack``), ``key``, ``auc``, ``separates``, ``with`` / ``without``
    (the groups' means), ``moves_quantize`` (metrics) or ``lift`` and ``calibrated`` (attacks), ``stable`` and
    ``trusted`` (docs/evaluation.md, "Which numbers to trust"). ``metrics``: ``{model: metrics}`` of a comparison;
    ``calibration``: the verdict's (:func:`~obliviate.attacks.verdict.robustness_summary`), where an attack
    missing or uncalibrated is never trusted."""
    with_ = [n for n in WITH if n in metrics]
    without = [n for n in WITHOUT if n in metrics]
    reads = {}
    for key in metric_keys(metrics):
        row = _row(key, "metric", key, metrics, with_, without)
        if row is not None:
            reads[key] = row
    for name, r in attack_reads().items():
        calibrated = bool(((calibration or {}).get(name) or {}).get("calibrated"))
        row = _row(name, "attack", r.after, metrics, with_, without, before=r.start, calibrated=calibrated)
        if row is not None:
            reads[name] = row
    return {"groups": {"with": with_, "without": without}, "reads": reads}


def _f(x) -> str | None:
    return None if x is None else f"{x:.2f}"


def trust_markdown(trust: dict) -> list[str]:
    """The report's section: how to read it, and a row per read (:func:`metric_trust`)."""
    g = trust["groups"]
    if not trust["reads"]:
        return ["## Which numbers to trust on this task", "",
                "- no metric could be read on both a model with the knowledge (" + ", ".join(WITH) + ") and one "
                "without (" + ", ".join(WITHOUT) + ").", ""]
    yes = lambda v: None if v is None else ("yes" if v else "no")  # noqa: E731
    rows = [{"read": name, "kind": r["kind"], "AUC": _f(r["auc"]), "separates": yes(r["separates"]),
             "with (mean)": _f(r["with"]), "without (mean)": _f(r["without"]),
             "moves under quantize": _f(r.get("moves_quantize")), "lift without": _f(r.get("lift")),
             "stable": yes(r["stable"]), "calibrated": yes(r.get("calibrated")), "trusted": yes(r["trusted"])}
            for name, r in trust["reads"].items()]
    cols = ["read", "kind", "AUC", "separates", "with (mean)", "without (mean)", "moves under quantize",
            "lift without", "stable", "calibrated", "trusted"]
    trusted = [n for n, r in trust["reads"].items() if r["trusted"]]
    return ["## Which numbers to trust on this task", "",
            "Each forget-side metric and each attack's after-score, read on the models that hold the knowledge ("
            + ", ".join(f"`{n}`" for n in g["with"]) + ") and those that do not ("
            + ", ".join(f"`{n}`" for n in g["without"]) + "). **AUC**: the chance that a model with the knowledge "
            "scores above one without (1: separates, 0.5: blind, 0: the wrong way round); it *separates* at "
            f"{SEPARATES_AUC} or more (or {1 - SEPARATES_AUC:.1f} or less). **Stable**: on the models without the "
            f"knowledge, quantization moves a metric by at most {STABLE_MOVE} (the largest move over the schemes), "
            f"and an attack lifts them by at most {STABLE_MOVE}. A read both separating and stable is *trusted*, an "
            "attack only where it is also calibrated on the positive controls (the robustness section) "
            "(OpenUnlearning's faithfulness and robustness, arXiv 2506.12618; docs/evaluation.md). With "
            f"{len(g['with'])} and {len(g['without'])} models one AUC step is "
            f"1/{max(1, len(g['with']) * len(g['without']))}.", "",
            "Trusted here: " + (", ".join(f"`{n}`" for n in trusted) if trusted else "none") + ".", "",
            markdown_table(rows, cols), ""]
