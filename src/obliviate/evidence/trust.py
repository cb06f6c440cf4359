"""Which numbers to trust on a task: each metric's and each attack's faithfulness and robustness.

OpenUnlearning's meta-evaluation (Dorna et al. 2025, arXiv 2506.12618; UDS, arXiv 2605.24614) on the models
every comparison builds: *faithful* when the separation AUC between :data:`WITH` and :data:`WITHOUT` is far
from 0.5, *robust* when stable under quantization and relearning; an attack is trusted only if also
calibrated. docs/evaluation.md, "Which numbers to trust".
"""

from __future__ import annotations

import math

from obliviate.eval.core import harmonic_mean
from obliviate.evidence.controls import POSITIVE_CONTROLS
from obliviate.evidence.verdict import reads as attack_reads
from obliviate.runs.report import markdown_table

WITH = ("base", *POSITIVE_CONTROLS)
"""The models that hold the forget knowledge."""
WITHOUT = ("oracle", "second_oracle", "filtered")
"""The models that do not (never saw the facts, or saw their tokens loss-masked)."""
MIN_POOL = 3
"""The fewest models a side for a separation AUC: with fewer, a read is "too few models", never trusted (1 v 1
has one pair, an AUC of 0, 0.5 or 1 by the luck of one draw)."""
SEPARATES_AUC = 0.8
"""A read separates when its AUC is at least this (or at most 1 minus this: the other way round)."""
STABLE_MOVE = 0.1
"""A read is stable when each stability it has (quantization, relearning) is at least ``1 - STABLE_MOVE``: no
model without the knowledge moves more than this under either; :func:`robustness`, their harmonic mean, is the
score."""
EXTRA_METRICS = ("probe_acc",)
"""Reads beside the ``forget_*`` metrics and the membership-inference AUCs."""
NOT_METRICS = ("_chance", "_items", "_tokens", "_prompts_cut")
"""Endings of ``forget_*`` numbers that are no metric: chance levels and counts (items, tokens, prompts
cut)."""
UNBOUNDED = ("_loss", "_ppl")
"""Endings of reads not on [0, 1] (a text set's loss and perplexity): their move is relative,
``(after - before) / (|before| + |after|)`` (UDS's form, defined there: such a read is far from 0), since an
absolute move in nats or perplexity has no common threshold."""
RELEARN_SCALES = {"forget_score": ("relearn", "relearn_disjoint")}
"""The relearning attacks that read a metric on its own scale (:func:`~obliviate.evidence.verdict.reads`
names): the forget score the relearning attacks track (``relearn``: the forget items; ``relearn_disjoint``:
the held-out ones). A metric not named here has no relearning read: its robustness is its quantization
stability alone."""


def _number(v) -> bool:
    """A finite number: NaN and infinities are no read (a NaN compares false with everything, so it would
    pass)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def separation_auc(with_: list[float], without: list[float]) -> float | None:
    """P(a model with the knowledge scores above one without) + 1/2 P(tie); None when a group is empty."""
    if not with_ or not without:
        return None
    wins = sum((a > b) + 0.5 * (a == b) for a in with_ for b in without)
    return wins / (len(with_) * len(without))


def stability(move: float) -> float:
    """``1 - |move|``, at least 0: how far a read stayed put on a model without the knowledge (1: not at all
    moved)."""
    return max(0.0, 1.0 - abs(move))


def worst(moves: dict[str, float]) -> tuple[float, str] | tuple[None, None]:
    """``(min over models of stability(move), that model)`` of ``{model: move}``; ``(None, None)`` where
    empty. The worst case, never a mean: one model moving far cannot hide among still ones, and a +0.3 and a
    -0.3 on two models cannot cancel."""
    if not moves:
        return None, None
    name = max(moves, key=lambda n: abs(moves[n]))
    return stability(moves[name]), name


def robustness(robust_quantize: float | None, robust_relearn: float | None) -> float | None:
    """The harmonic mean of the stabilities measured (UDS's and OpenUnlearning's combination of quantization
    and relearning robustness); one alone where only one is measured; None where neither is."""
    measured = [v for v in (robust_quantize, robust_relearn) if v is not None]
    return harmonic_mean(measured) if measured else None


def metric_keys(metrics: dict) -> list[str]:
    """The forget-side metrics read: every number ``forget_*`` (chance levels aside), each
    membership-inference AUC (``mia_auc_*``, not the control's copy) and :data:`EXTRA_METRICS`, in first-seen
    order."""
    keys: dict[str, None] = {}
    for m in metrics.values():
        for k, v in m.items():
            if _number(v) and ((k.startswith("forget_") and not k.endswith(NOT_METRICS))
                               or (k.startswith("mia_auc_") and not k.endswith("_control"))
                               or k in EXTRA_METRICS):
                keys[k] = None
    return list(keys)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _signed_largest(moves: list[float]) -> float | None:
    """The move of largest size, with its sign (None if none)."""
    return max(moves, key=abs) if moves else None


def move(start: float, after, key: str = "") -> float:
    """How far a perturbation moved read ``key`` on a model, signed: ``after - start`` on a read on [0, 1],
    relative on an :data:`UNBOUNDED` one; an ``after`` that is not a finite number broke the read: 1, the
    worst."""
    if not _number(after):
        return 1.0
    if key.endswith(UNBOUNDED):
        scale = abs(start) + abs(after)
        return 0.0 if scale == 0 else (after - start) / scale
    return after - start


def quantize_move(m: dict, key: str) -> float | None:
    """The largest ``|quantize_<scheme>_<key> - key|`` (:func:`move`) over the schemes ``m`` was quantized
    with (a scheme whose read is not finite: 1); None if ``key`` is not a finite number on ``m`` or no scheme
    rescored it."""
    if not _number(m.get(key)):
        return None
    moves = [abs(move(m[key], m[f"quantize_{s}_{key}"], key)) for s in _schemes(m)
             if m.get(f"quantize_{s}_{key}") is not None]
    return max(moves) if moves else None


def _schemes(m: dict) -> list[str]:
    """The quantization schemes whose forget score ``m`` holds."""
    return [k[len("quantize_"):-len("_forget_score")] for k in m
            if k.startswith("quantize_") and k.endswith("_forget_score") and k != "quantize_forget_score"]


def _lift(m: dict, start: str, after: str) -> float | None:
    """:func:`move` from ``start`` to ``after`` on ``m``; None where the start is not a finite number or the
    after is missing."""
    if not _number(m.get(start)) or m.get(after) is None:
        return None
    return move(m[start], m[after], after)


def relearn_lift(m: dict, key: str) -> float | None:
    """The lift of metric ``key`` under relearning on ``m``: of the relearning reads on its scale
    (:data:`RELEARN_SCALES`) that ``m`` holds, the largest ``after - start`` in size, signed; None where
    none."""
    reads = attack_reads()
    lifts = [_lift(m, reads[a].start, reads[a].after) for a in RELEARN_SCALES.get(key, ()) if a in reads]
    return _signed_largest([x for x in lifts if x is not None])


def _kleene_and(values: list[bool | None]) -> bool | None:
    """False if any is False, else None if any is None, else True: a read known to fail one test is not
    trusted, whatever the others could not say."""
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def _row(kind: str, key: str, metrics: dict, with_: list[str], without: list[str],
         start: str | None = None, calibrated: bool | None = None) -> dict | None:
    w = [metrics[n][key] for n in with_ if _number(metrics[n].get(key))]
    wo = [metrics[n][key] for n in without if _number(metrics[n].get(key))]
    if not w or not wo:
        return None
    too_few = min(len(w), len(wo)) < MIN_POOL
    auc = None if too_few else separation_auc(w, wo)
    row = {"kind": kind, "key": key, "n_with": len(w), "n_without": len(wo), "too_few_models": too_few,
           "auc": auc,
           "separates": None if auc is None else max(auc, 1 - auc) >= SEPARATES_AUC - 1e-9,
           "with": _mean(w), "without": _mean(wo)}
    quantize = {n: quantize_move(metrics[n], key) for n in without}
    if kind == "metric":
        relearn = {n: relearn_lift(metrics[n], key) for n in without}
    else:
        relearn = {n: _lift(metrics[n], start, key) for n in without}
    quantize = {n: v for n, v in quantize.items() if v is not None}
    relearn = {n: v for n, v in relearn.items() if v is not None}
    row["quantize_moves"], row["relearn_lifts"] = quantize, relearn
    row["robust_quantize"], row["worst_quantize"] = worst(quantize)
    row["robust_relearn"], row["worst_relearn"] = worst(relearn)
    row["robustness"] = robustness(row["robust_quantize"], row["robust_relearn"])
    parts = [v for v in (row["robust_quantize"], row["robust_relearn"]) if v is not None]
    # the harmonic mean is the score; stable needs each measured part at the bar (the mean of a perfect
    # quantization and a 0.18 relearning lift would pass it)
    row["stable"] = None if not parts else all(v >= 1 - STABLE_MOVE - 1e-9 for v in parts)
    tests = [row["separates"], row["stable"]]
    if kind == "attack":
        row["calibrated"] = calibrated
        tests.append(calibrated)
    row["trusted"] = _kleene_and(tests)
    return row


def metric_trust(metrics: dict, calibration: dict | None = None) -> dict:
    """``{"groups": {"with", "without"}, "min_pool", "reads": {name: row}}``: a row per forget-side metric
    (:func:`metric_keys`) and per attack of :func:`~obliviate.evidence.verdict.reads` read (a finite number)
    on at least one model of each group, with ``kind`` (``metric`` / ``attack``), ``key``, ``n_with`` /
    ``n_without`` (the models of each pool that hold a finite read), ``too_few_models`` (fewer than
    :data:`MIN_POOL` a side: ``auc`` and ``separates`` None, never trusted), ``auc``, ``separates``, ``with``
    / ``without`` (the pools' means); ``quantize_moves`` and ``relearn_lifts`` (``{model: move}`` on the
    models without the knowledge: the largest quantization move; the signed lift under relearning, for an
    attack under the attack itself), ``robust_quantize`` / ``robust_relearn`` (the worst model's stability,
    None where not measured), ``worst_quantize`` / ``worst_relearn`` (that model), ``robustness`` (their
    harmonic mean, :func:`robustness`), ``stable``, ``calibrated`` (attacks) and ``trusted``
    (docs/evaluation.md, "Which numbers to trust"). ``metrics``: ``{model: metrics}`` of a comparison;
    ``calibration``: the verdict's (:func:`~obliviate.evidence.verdict.robustness_summary`), where an attack
    missing or uncalibrated is never trusted."""
    with_ = [n for n in WITH if n in metrics]
    without = [n for n in WITHOUT if n in metrics]
    reads = {}
    for key in metric_keys(metrics):
        row = _row("metric", key, metrics, with_, without)
        if row is not None:
            reads[key] = row
    for name, r in attack_reads().items():
        calibrated = bool(((calibration or {}).get(name) or {}).get("calibrated"))
        row = _row("attack", r.after, metrics, with_, without, start=r.start, calibrated=calibrated)
        if row is not None:
            reads[name] = row
    return {"groups": {"with": with_, "without": without}, "min_pool": MIN_POOL, "reads": reads}


def _f(x) -> str | None:
    return None if x is None else f"{x:.2f}"


def auc_cell(r: dict) -> str:
    """The AUC with the pool sizes beside it (``0.94 (3 v 3)``), or ``too few models (1 v 1)``."""
    pools = f"({r['n_with']} v {r['n_without']})"
    return f"too few models {pools}" if r["auc"] is None else f"{r['auc']:.2f} {pools}"


def _robust_cell(value: float | None, model: str | None) -> str | None:
    return None if value is None else f"{value:.2f} ({model})"


def trust_markdown(trust: dict) -> list[str]:
    """The report's section: how to read it, and a row per read (:func:`metric_trust`)."""
    g = trust["groups"]
    if not trust["reads"]:
        return ["## Which numbers to trust on this task", "",
                "- no metric could be read on both a model with "
                "the knowledge (" + ", ".join(WITH) + ") and one without (" + ", ".join(WITHOUT) + ").", ""]
    yes = lambda v: None if v is None else ("yes" if v else "no")  # noqa: E731
    rows = [{"read": name, "kind": r["kind"], "AUC (with v "
                                              "without)": auc_cell(r), "separates": yes(r["separates"]),
             "with (mean)": _f(r["with"]), "without (mean)": _f(r["without"]),
             "quantize (worst)": _robust_cell(r["robust_quantize"], r["worst_quantize"]),
             "relearn / attack (worst)": _robust_cell(r["robust_relearn"], r["worst_relearn"]),
             "robustness": _f(r["robustness"]), "stable": yes(r["stable"]),
             "calibrated": yes(r.get("calibrated")),
             "trusted": yes(r["trusted"])}
            for name, r in trust["reads"].items()]
    cols = ["read", "kind", "AUC (with v "
                            "without)", "separates", "with (mean)", "without (mean)", "quantize (worst)",
            "relearn / attack (worst)", "robustness", "stable", "calibrated", "trusted"]
    trusted = [n for n, r in trust["reads"].items() if r["trusted"]]
    few = [n for n, r in trust["reads"].items() if r["too_few_models"]]
    return ["## Which numbers to trust on this task", "",
            "Each forget-side metric and each attack's after-score, "
            "read on the models that hold the knowledge ("
            + ", ".join(f"`{n}`" for n in g["with"]) + ") and those that do not ("
            + ", ".join(f"`{n}`" for n in g["without"]) + "). **AUC**: the chance that a model with the "
                                                          "knowledge scores above one without (1: separates, "
                                                          "0.5: blind, 0: the wrong way round), beside it "
                                                          "the models read on each side; read only with "
                                                          f"{MIN_POOL} or more a side (else *too few "
                                                          "models*, never trusted); it *separates* at "
                                                          f"{SEPARATES_AUC} or more (or "
                                                          f"{1 - SEPARATES_AUC:.1f} or less). "
                                                          "**Robustness**, on the models without the "
                                                          "knowledge, each model's stability 1 - |move| and "
                                                          "the worst model's shown: under quantization (the "
                                                          "largest move over the schemes) and under "
                                                          "relearning (a metric: the relearning attacks that "
                                                          "read its scale; an attack: its own after - "
                                                          "before), their harmonic mean where both are "
                                                          "measured; *stable* when each measured part is "
                                                          f"{1 - STABLE_MOVE:.1f} or more. A read both "
                                                          "separating and stable is *trusted*, an attack "
                                                          "only where it is also calibrated on the positive "
                                                          "controls (the robustness section) "
                                                          "(OpenUnlearning's meta-evaluation, arXiv "
                                                          "2506.12618, and UDS, arXiv 2605.24614, "
                                                          "adapted: docs/evaluation.md).", "",
            "Trusted here: " + (", ".join(f"`{n}`" for n in trusted) if trusted else "none") + ".", "",
            *([f"Too few models to read the AUC of {len(few)} read(s) (fewer than {MIN_POOL} a side).", ""]
              if few else []),
            markdown_table(rows, cols), ""]
