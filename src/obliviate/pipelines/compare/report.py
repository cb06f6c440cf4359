"""The comparison's report: ``report.md`` and a self-contained ``report.html``, with their plots."""

from __future__ import annotations

import json
from pathlib import Path

from obliviate.attacks.relearn_disjoint import LEAKAGE_FLAG, leakage_flag
from obliviate.eval.suite import PRIMARY, keep_score
from obliviate.evidence.frontier import frontier_points, missing, plot_frontier
from obliviate.evidence.trust import trust_markdown
from obliviate.evidence.verdict import recovery, robustness_markdown
from obliviate.pipelines.compare.muse_runs import markdown as muse_markdown
from obliviate.runs.cost import share_text
from obliviate.runs.report import (
    _plt,
    markdown_table,
    md_code,
    md_escape,
    plot_grouped_bars,
    plot_recovery_curves,
    plot_tradeoff,
    read_jsonl,
    save_figure,
    write_html,
)
from obliviate.runs.results import atomic_write_text
from obliviate.tasks.base import Task

COLUMNS = ["model", "forget_score", "retain_score", "heldout_keep_score", "neighbour_score", "utility_score",
           "s_unlearning",
           "s_unlearning_trained",
           "forget_quality", "abs_forget_score_gap", "relearn_acc", "relearn_disjoint_acc", "probe_acc",
           "format_shift_acc"]
ATTACK_CURVES = {"relearn": "relearning on the related corpus",
                 "relearn_disjoint": "relearning on the other forget facts (held-out thirds scored)",
                 "relearn_retain": "relearning on the retain set alone"}
"""The relearning attacks whose recovery curves (``<name>_curve``) a comparison keeps and draws, with each
figure's title."""


def set_scores(task: Task, metrics: dict) -> dict[str, dict[str, float]]:
    """``{model: {set name: primary score}}`` of every QA and MCQ set (the per-set plot)."""
    keys = [(es.name, f"{es.name}_{PRIMARY[es.kind]}") for es in task.evals if es.kind in PRIMARY]
    return {name: {s: m[k] for s, k in keys if m.get(k) is not None} for name, m in metrics.items()}


def plot_forget_keep(metrics: dict, png: Path) -> None:
    points = {name: (m["forget_score"], keep_score(m)) for name, m in metrics.items()
              if m.get("forget_score") is not None and keep_score(m) is not None}
    after = {name: m.get("relearn_disjoint_acc", m.get("relearn_acc")) for name, m in metrics.items()}
    plot_tradeoff(points, png, "forget score (lower is "
                               "better)", "kept: retain (or neighbour / utility) score",
                  "forget vs kept (arrows: after relearning)", arrows=after)


def plot_log(log: Path, png: Path) -> None:
    """The base model's pretraining loss terms (a task pretrained on its world)."""
    plt = _plt()
    recs = [r for r in read_jsonl(log) if "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for term in ("lm", "qa"):
        pts = [(r["step"], r[term]) for r in recs if term in r]
        if pts:
            ax.plot(*zip(*pts), label=f"{term} term")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("base model pretraining", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, png)


def not_computed_markdown(task: Task, metrics: dict) -> list[str]:
    """The report's section of what was not computed: each metric over zero items or tokens (``absent``), once
    for every model it is absent on; the task's missing files are the MUSE section's (or, elsewhere, listed
    here)."""
    by_line: dict[str, list[str]] = {}
    for name, m in metrics.items():
        for line in (m.get("absent") or {}).values():
            by_line.setdefault(line, []).append(name)
    lines = [f"- {md_escape(line)} "
             f"({', '.join(md_escape(n) for n in names)})" for line, names in by_line.items()]
    if not task.meta.get("muse"):
        lines += [f"- {md_escape(x)}" for x in task.meta.get("missing") or []]
    return ["## Not computed", "", *lines, ""] if lines else []


def leakage_note(m: dict) -> str:
    """The flag beside a disjoint recovery whose folds leak
    (:func:`~obliviate.attacks.relearn_disjoint.leakage_flag`), in bold, else an empty string."""
    flag = leakage_flag(m)
    return "" if flag is None else f" **{flag[0].upper()}{flag[1:]}.**"


def recovery_lines(metrics: dict, robustness: dict | None = None) -> list[str]:
    """One sentence per model on relearning on the other forget facts (held-out thirds scored), with the share
    *brought back* (:func:`~obliviate.evidence.verdict.recovery`: of what the model lost against the base
    model), marked where the attack is uncalibrated; the oracle's last, as the band a model that never saw the
    facts stays in."""
    base_d = metrics["base"].get("relearn_disjoint_base_acc")
    calib = ((robustness or {}).get("calibration") or {}).get("relearn_disjoint")
    mark = "" if calib is not None and calib["calibrated"] else " (uncalibrated)"
    lines = []
    for name, m in metrics.items():
        if name in ("base", "oracle") or m.get("relearn_disjoint_acc") is None or not base_d:
            continue
        share = recovery(m["relearn_disjoint_start_acc"], m["relearn_disjoint_acc"], base_d)
        lines.append(f"- **{md_escape(name)}**: forget score {m['relearn_disjoint_start_acc']:.2f} on the "
                     f"held-out thirds before the attack, {m['relearn_disjoint_acc']:.2f} "
                     "after relearning on the other thirds"
                     + ("" if share is None else f" ({100 * share:.0f}% of what it "
                                                 "lost brought back)") + f"{mark}."
                     + leakage_note(m))
    o = metrics.get("oracle", {})
    band = ((robustness or {}).get("band") or {}).get("relearn_disjoint")
    if o.get("relearn_disjoint_acc") is not None:
        lines.append("- the oracle, which never saw the forget data, goes from "
                     f"{o['relearn_disjoint_start_acc']:.2f} to "
                     f"{o['relearn_disjoint_acc']:.2f} under the same attack"
                     + (f"; its band (sampling noise included) ends at {band['upper']:.2f}. A model above it "
                        "holds something the oracle does not; whether that is hidden knowledge is the "
                        "verdict's to say, against the positive "
                        "controls" if band else "") + "." + leakage_note(o))
    return lines


def method_lines(metrics: dict, skipped: dict | None = None) -> list[str]:
    """One line per method of the comparison: its run's outcome without any attack (the line of
    :func:`~obliviate.eval.outcome.unlearn_outcome`: "forgot little: try `obliviate tune`" where it did
    nothing measurable), what an edit method edited, and each skipped method with its reason."""
    lines = []
    for name, m in metrics.items():
        v = m.get("unlearn_outcome")
        if not v:
            continue
        edit = m.get("edit") or {}
        did = ""
        if "n_edited" in edit:
            frac = edit.get("vocab_fraction_edited")
            did = (f" It edited {edit['n_edited']} token rows"
                   + ("" if frac is None else f" ({100 * frac:.2f}% of the vocabulary)") + ".")
        lines.append(f"- **{md_escape(name)}**: {md_escape(v['line'])}.{did}")
    lines += [f"- **{md_escape(name)}**: skipped: {md_escape(why)}." for name, why in (skipped or {}).items()]
    return lines


ATTACK_COLUMNS = {"relearn_acc": "relearn", "relearn_disjoint_acc": "relearn_disjoint",
                  "format_shift_acc": "format_shift", "probe_acc": "probe"}
"""The main table's attack columns, by the attack whose calibration they carry."""


def main_table(metrics: dict, robustness: dict | None) -> tuple[list[str], list[dict]]:
    """The report's first table: each model's scores and its verdict; an attack column whose attack is
    uncalibrated says so in its header."""
    calib = (robustness or {}).get("calibration") or {}
    verdicts = (robustness or {}).get("verdicts") or {}

    leaks = [m["relearn_disjoint_leakage"] for m in metrics.values()
             if m.get("relearn_disjoint_leakage") is not None]

    def header(c: str) -> str:
        key = ATTACK_COLUMNS.get(c)
        if key == "probe":
            ok = any(m.get("probe_calibrated") for m in metrics.values())
        else:
            ok = key is None or (key in calib and calib[key]["calibrated"])
        if key == "relearn_disjoint" and leaks and max(leaks) >= LEAKAGE_FLAG:
            c = f"{c} (leakage {max(leaks):.2f})"
        return c if ok else f"{c} (uncalibrated)"

    present = [c for c in COLUMNS if c == "model" or any(m.get(c) is not None for m in metrics.values())]
    cols = present[:1] + (["verdict"] if verdicts else []) + [header(c) for c in present[1:]]
    rows = [{"model": n,
             **({"verdict": verdicts[n]["verdict"] if n in verdicts else None} if verdicts else {}),
             **{header(k): m.get(k) for k in present[1:]}} for n, m in metrics.items()]
    return cols, rows


def cost_share_markdown(cost: dict | None) -> list[str]:
    """The report's cost table: what making each model cost (``cost.removal``: each method's unlearning, the
    oracle's and every pretraining-made model's pretraining) in forward+backward tokens and FLOPs, and each as
    a share of the oracle's pretraining (``share_of_oracle_pretraining`` and ``_flops``); where the oracle's
    pretraining is unknown, one line saying why. Empty without a record."""
    removal, pre = (cost or {}).get("removal") or {}, (cost or {}).get("oracle_pretraining")
    if not removal and not pre:
        return []
    head = ["## Cost as a share of retraining", ""]
    if not pre or not pre.get("tokens"):
        return [*head, f"No share: the oracle's pretraining is {md_escape((pre or {}).get('what') or 'unknown')}.",
                ""]
    shares, flops = cost.get("share_of_oracle_pretraining") or {}, cost.get("share_of_oracle_pretraining_flops") or {}
    rows = [{"model": name, "tokens": None if r.get("tokens") is None else f"{r['tokens']:,}",
             "FLOPs": None if r.get("flops") is None else f"{r['flops']:.3g}",
             "share (tokens)": share_text(shares.get(name)), "share (FLOPs)": share_text(flops.get(name)),
             "what it counts": r.get("what")} for name, r in removal.items()]
    return [*head,
            "Each model's cost (forward plus backward tokens through it and its copies; FLOPs `N (2 forward + "
            f"4 backward tokens)`, N = {pre.get('n_params'):,} parameters) over the oracle's pretraining: "
            f"{pre['tokens']:,} tokens, {pre.get('flops') or 0:.3g} FLOPs ({md_escape(pre.get('what') or '')}). "
            "docs/evaluation.md, \"Cost\", says what is counted.", "",
            markdown_table(rows, ["model", "tokens", "FLOPs", "share (tokens)", "share (FLOPs)", "what it counts"],
                           missing="n/a"), ""]


def write_report(out: Path, task: Task, metrics: dict, curves: dict, configs: dict, seconds: float,
                 robustness: dict | None = None, base_log: Path | None = None, skipped: dict | None = None,
                 trust: dict | None = None, cost: dict | None = None) -> None:
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    plot_forget_keep(metrics, plots / "forget_keep.png")
    figures = [("forget vs kept", "forget_keep.png")]
    for key, title in ATTACK_CURVES.items():
        drawn = {name: c[key] for name, c in curves.items() if c.get(key)}
        if drawn:
            base = metrics["base"].get(f"{key}_base_acc")
            plot_recovery_curves(drawn, plots / f"{key}.png", "relearning steps", "forget score under attack",
                                 title, base_line=base)
            figures.append((title, f"{key}.png"))
    plot_grouped_bars(set_scores(task, metrics), plots / "sets.png", "score by evaluation set", "score")
    figures.append(("score by evaluation set", "sets.png"))
    if base_log is not None and base_log.exists():
        plot_log(base_log, plots / "base_loss.png")
        figures.append(("base model training", "base_loss.png"))
    points = frontier_points({"metrics": metrics, "robustness": robustness, "cost": cost}) if robustness else []
    if any(not missing(p) for p in points):
        plot_frontier({"this run": points}, plots / "frontier.png")
        figures.append(("the robustness frontier: cost as a share of retraining against the worst calibrated "
                        "recovery (filled: neighbours kept)", "frontier.png"))
    columns, rows = main_table(metrics, robustness)
    sets = [es for es in task.evals if es.kind in PRIMARY]
    set_rows = [{"model": n, **v} for n, v in set_scores(task, metrics).items()]
    did = method_lines(metrics, skipped)
    md = [f"# obliviate: method comparison on task {md_code(task.name)}", "",
          f"Forget: {task.forget.describe()}; retain: {task.retain.describe()}. Role scores are the mean of "
          "the role's QA (exact match) and MCQ sets, variants of the forget set aside; S-unlearning = U x R "
          "against the base model; `forget_quality` is the KS-test p-value of the forget truth ratios "
          "against the oracle's (higher = closer); `format_shift_acc` is the best score over the forget "
          "set's variants (docs/evaluation.md).", "",
          *[line for note in task.meta.get("notes") or [] for line in (f"Note: {md_escape(note)}.", "")],
          markdown_table(rows, columns), "",
          *(trust_markdown(trust) if trust else []),
          *(robustness_markdown(metrics, robustness) if robustness else []),
          *(["## What each method did", "",
             "Each method's run read without any attack (docs/methods.md, \"Did the run work?\"), and every "
             "method of `methods=` that was not run, with the reason.", "", *did, ""] if did else []),
          *cost_share_markdown(cost),
          *not_computed_markdown(task, metrics),
          *muse_markdown(task, metrics),
          "## How much comes back under relearning on the other forget facts", "",
          *(recovery_lines(metrics, robustness) or ["- the task has no disjoint folds to relearn on."]), "",
          "## Every evaluation set", "",
          ", ".join(f"{md_code(es.name)} ({es.role}{', variant' if es.variant else ''})"
                    for es in sets) + ".", "",
          markdown_table(set_rows, ["model"] + [es.name for es in sets]), "",
          *[line for title, png in figures for line in (f"![{title}](plots/{png})", "")],
          "## Method settings", "", "```json", json.dumps(configs, indent=1), "```", "",
          f"Total time {seconds:.0f} s."]
    atomic_write_text(out / "report.md", "\n".join(md) + "\n")
    write_html(out / "report.md", out / "report.html", images=[f"plots/{png}" for _, png in figures])


def robustness_over_seeds(results: dict) -> list[str]:
    """Markdown of several comparisons' robustness (``{label: results.json as a dict}``, e.g. one per world
    seed): per judged model and run, the verdict and the attack (and control) that decided it; per positive
    control and run, what it keeps of the base model's retain and neighbour scores; per attack and run,
    whether it was calibrated and on which positive control; and each attack's cost on each model (forwards,
    backward passes and tokens, the mean over the models and runs; wall seconds from the runs' timings)."""
    labels = list(results)
    methods = list(dict.fromkeys(n for r in results.values() for n in r["robustness"]["verdicts"]))
    attacks = list(dict.fromkeys(k for r in results.values() for k in r["robustness"]["calibration"]))
    verdicts = []
    for name in methods:
        row = {"method": name}
        for lab in labels:
            v = results[lab]["robustness"]["verdicts"].get(name)
            row[lab] = None if v is None else v["verdict"] + (
                f" ({v['attack']}{', ' + v['control'] if v.get('control') else ''})"
                if v.get("attack") else "") + (
                "; keeps " + ", ".join(f"{k} {x:.2f}" for k, x in v["keep"].items()) if v.get("keep") else "")
        verdicts.append(row)
    controls = []
    for name in dict.fromkeys(c for r in results.values() for c in (r["robustness"].get("controls") or {})):
        row = {"control": name}
        for lab in labels:
            c = (results[lab]["robustness"].get("controls") or {}).get(name)
            row[lab] = None if c is None else ", ".join(f"{k} {v:.2f}" for k, v in c["keep"].items()) + (
                "" if c["selective"] else " (non-selective)")
        controls.append(row)
    calib = []
    for key in attacks:
        row = {"attack": key}
        for lab in labels:
            c = results[lab]["robustness"]["calibration"].get(key)
            row[lab] = None if c is None else ("yes: " + ", ".join(c["calibrated_by"]) if c["calibrated"]
                                               else "no")
        calib.append(row)
    costs: dict = {}
    for r in results.values():
        for name, m in r["metrics"].items():
            secs = (r.get("timings") or {}).get(f"{name}_seconds_by_attack") or {}
            for key, c in (m.get("attack_cost") or {}).items():
                costs.setdefault(key, []).append({**c, "seconds": secs.get(key)})
    cost_rows = [{"attack": k,
                  **{f: sum(c[f] for c in cs) / len(cs) for f in ("forwards", "backwards", "tokens")},
                  "seconds": (sum(c["seconds"] for c in cs if c["seconds"] is not None) /
                              max(1, sum(c["seconds"] is not None for c in cs)))}
                 for k, cs in costs.items()]
    return ["## Verdicts", "", markdown_table(verdicts, ["method", *labels]), "",
            "## What each positive control keeps (share of the base model's score)", "",
            markdown_table(controls, ["control", *labels]), "",
            "## Calibration of each attack", "", markdown_table(calib, ["attack", *labels]), "",
            "## Cost of each attack per model (mean over models and runs)", "",
            markdown_table(cost_rows, ["attack", "forwards", "backwards", "tokens", "seconds"], fmt="{:.0f}"),
            ""]
