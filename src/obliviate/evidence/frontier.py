"""The robustness frontier: each model's cost as a share of retraining against the most any calibrated attack
brought back, marked by whether it kept its neighbours (docs/evaluation.md, "The frontier")."""

from __future__ import annotations

from obliviate.evidence.verdict import (KEEP_SHARE, KNOWN_REMOVED, base_reference, finite, judged, keep_shares,
                                        read_of, recovery)
from obliviate.runs.cost import pass_tokens, ratio
from obliviate.runs.report import _plt, save_figure

FRONTIER_REFERENCES = ("oracle",)
"""The reference shown on the frontier beside the judged models: the oracle, retraining itself (share 1)."""


def worst_recovery(m: dict, base: dict, calibration: dict) -> tuple[float | None, str | None]:
    """The largest share of the base model's score that an attack calibrated on this comparison and deciding
    verdicts brought back on model ``m`` (:func:`~obliviate.evidence.verdict.recovery`: ``(after - start) /
    (base - start)`` on the attack's own read), and that attack; ``(None, None)`` where no such attack was read."""
    best: tuple[float | None, str | None] = (None, None)
    for key, c in calibration.items():
        if not (c.get("calibrated") and c.get("decides", True)):
            continue
        r = read_of(key)
        ref, _ = base_reference(base, key)
        v = recovery(m.get(r.start), m.get(r.after), ref)
        if v is not None and (best[0] is None or v > best[0]):
            best = (v, key)
    return best


def cost_share(res: dict, name: str) -> float | None:
    """Model ``name``'s cost as a share of the oracle's pretraining (``cost.share_of_oracle_pretraining``); the
    oracle's is 1 (it is the retraining); for a result recorded before known models had a share (no
    ``cost.removal``), a known model's pretraining passes (``timings.<name>_pretrain_passes``) over the
    oracle's. A result with ``cost.removal`` is read as it is: a null share there is unknown (a pretraining
    resumed by an obliviate that counted only the passes since), never recomputed from those passes."""
    if name in FRONTIER_REFERENCES:
        return 1.0
    cost = res.get("cost") or {}
    share = (cost.get("share_of_oracle_pretraining") or {}).get(name)
    if share is not None:
        return finite(share)
    if "removal" in cost:
        return None
    made = (res.get("timings") or {}).get(f"{name}_pretrain_passes")
    return ratio(pass_tokens(made), pass_tokens((cost.get("oracle_pretraining") or {}).get("passes")))


def frontier_points(res: dict) -> list[dict]:
    """One point per model of a comparison's ``results.json`` (the oracle, the known-removed models and every
    judged method): ``cost_share`` (:func:`cost_share`), ``recovery`` and the ``attack`` that gave it
    (:func:`worst_recovery`), ``neighbour_keep`` (its neighbour score over the base model's; the retain keep
    where the task has no neighbours), ``keeps`` (that share at least :data:`~obliviate.evidence.verdict.
    KEEP_SHARE`) and the ``verdict``."""
    metrics, rob = res.get("metrics") or {}, res.get("robustness") or {}
    base = metrics.get("base")
    if base is None:
        return []
    calibration, verdicts = rob.get("calibration") or {}, rob.get("verdicts") or {}
    names = [n for n in FRONTIER_REFERENCES if n in metrics] + judged(metrics)
    points = []
    for name in names:
        m = metrics[name]
        shares = keep_shares(m, base)
        keep = shares.get("neighbour", shares.get("retain", shares.get("utility", shares.get("keep"))))
        value, attack = worst_recovery(m, base, calibration)
        points.append({"model": name, "cost_share": cost_share(res, name), "recovery": value, "attack": attack,
                       "neighbour_keep": keep, "keeps": None if keep is None else keep >= KEEP_SHARE - 1e-12,
                       "verdict": (verdicts.get(name) or {}).get("verdict"),
                       "kind": "reference" if name in FRONTIER_REFERENCES else
                       "known" if name in KNOWN_REMOVED else "method"})
    return points


def missing(p: dict) -> str | None:
    """Why point ``p`` of :func:`frontier_points` cannot be drawn (no positive cost share for the log scale, or
    no calibrated attack read), None where it can."""
    if p.get("cost_share") is None or p["cost_share"] <= 0:
        return "no cost share"
    return "no calibrated attack read" if p.get("recovery") is None else None


def plot_frontier(runs: dict[str, list[dict]], png, title: str = "the robustness frontier") -> list[str]:
    """Draw :func:`frontier_points` of one or more comparisons (``{run label: points}``, e.g. one per world
    seed) into ``png``: x the cost as a share of retraining (log scale), y the worst calibrated recovery, one
    colour per model, the marker filled where the model kept its neighbours. Returns the models left out, each
    with why (no cost share, or no calibrated attack read)."""
    plt = _plt()
    names = list(dict.fromkeys(p["model"] for points in runs.values() for p in points))
    palette = [*plt.get_cmap("tab10").colors, *plt.get_cmap("Dark2").colors]  # 18 distinct colours
    colours = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    shapes = ["o", "s", "^", "D", "v", "P", "X", "*"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    left_out, drawn = [], set()
    for i, (label, points) in enumerate(runs.items()):
        for p in points:
            why = missing(p)
            if why:
                left_out.append(f"{p['model']} ({label}): {why}")
                continue
            c = colours[p["model"]]
            ax.scatter([p["cost_share"]], [p["recovery"]], s=46, marker=shapes[i % len(shapes)], edgecolors=[c],
                       facecolors=[c] if p.get("keeps") else ["none"], linewidths=1.4,
                       label=p["model"] if p["model"] not in drawn else None)
            drawn.add(p["model"])
    ax.set_xscale("log")
    ax.set_xlabel("cost as a share of retraining (the oracle's pretraining, tokens)")
    ax.set_ylabel("worst calibrated recovery")
    ax.axhline(0.0, color="0.8", lw=0.8)
    ax.set_title(f"{title}\nfilled: kept >= {KEEP_SHARE:.0%} of the base model's neighbours"
                 + (f"; marker shape: {', '.join(runs)}" if len(runs) > 1 else ""), fontsize=9)
    if drawn:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    save_figure(fig, png)
    return left_out
