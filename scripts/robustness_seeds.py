"""Robustness of the four baselines on world seeds 0-3 under every attack (issue #30).

Runs ``obliviate compare`` on the world for each seed with every attack (``--attacks all``: relearning, MIA,
probe, format shift, quantization, direction ablation, logit lens, in-context, adversarial prompts, unrelated
fine-tuning and GCG) on the base model, the oracle, both positive controls and GradDiff, NPO, SimNPO and RMU;
each run writes its own report (``OUT/seed<k>/report.md`` and ``.html``, with the robustness table). Then
``OUT/robustness.md`` (and ``.html``) puts the runs side by side: verdicts and the attack that decided each, the
calibration of each attack per seed, and each attack's cost (:func:`obliviate.pipelines.compare.report.
robustness_over_seeds`), then the frontier (``OUT/frontier.png``: cost as a share of retraining against the worst
calibrated recovery, one point per model per seed; :mod:`obliviate.evidence.frontier`). A finished seed is not run
again (its results.json is read), so a killed run resumes.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/robustness_seeds.py --out runs/robustness
    .venv/bin/python scripts/robustness_seeds.py --out runs/robustness --tables-only
    .venv/bin/python scripts/robustness_seeds.py --out /tmp/r --seeds 0 -- pretrain.world.n_forget=4 ...

Arguments after ``--`` go to every ``compare`` (config overrides). Estimated time: docs/evaluation.md, "Which
control calibrates which attack".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from obliviate.evidence.frontier import frontier_points, plot_frontier
from obliviate.evidence.verdict import KNOWN_REMOVED
from obliviate.pipelines.compare.report import robustness_over_seeds
from obliviate.runs.report import write_html

METHODS = "graddiff,npo,simnpo,rmu"
"""The methods compared by default: the four baselines (issue #44's run adds ``undo,tar,repnoise,sam_npo,jensun``,
issue #59's ``mudman``)."""


def _f(x, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _cost(m: dict, key: str) -> str:
    """A recovery cost in tokens as the report shows it: exact, ``<= x`` (below the first read) or ``> budget``."""
    bound, tokens = m.get(f"{key}_bound"), m.get(f"{key}_tokens")
    if tokens is None:
        return "-"
    return {"at_most": f"<= {tokens:.0f}", "above_budget": f"> {tokens:.0f}"}.get(bound, f"{tokens:.0f}")


def per_model_table(res: dict) -> list[str]:
    """One comparison's models in one table: verdict and what decided it, forget score, keep shares, disjoint
    relearning, recovery cost (tokens) and its ratio to learning, S-unlearning (held-out and trained R), and the
    method's unlearning cost (forward and backward passes, seconds)."""
    verdicts, timings = res["robustness"]["verdicts"], res.get("timings", {})
    rows = ["| model | verdict (decided by) | forget | retain keep | neighbour keep | disjoint relearning | "
            "recovery cost | vs learning | S (held-out) | S (trained) | unlearning fwd/bwd | unlearning s |",
            "|" + "---|" * 12]
    controls = res["robustness"].get("controls") or {}
    metrics = res["metrics"]
    first = [n for n in ("oracle", *controls, *KNOWN_REMOVED) if n in metrics]
    for name in first + [n for n in metrics if n not in first and n != "base"]:
        m, v = metrics[name], verdicts.get(name)
        verdict = "(control)" if v is None else v["verdict"] + (
            f" ({v['attack']}, {v['control']})" if v.get("attack") and v.get("control") else "")
        keep = (v or controls.get(name) or {}).get("keep") or {}
        ratio = m.get("recovery_cost_vs_learning")
        rows.append(f"| {name} | {verdict} | {_f(m.get('forget_score'))} | {_f(keep.get('retain'))} | "
                    f"{_f(keep.get('neighbour'))} | {_f(m.get('relearn_disjoint_start_acc'))} -> "
                    f"{_f(m.get('relearn_disjoint_acc'))} | {_cost(m, 'recovery_cost')} | {_f(ratio)} | "
                    f"{_f(m.get('s_unlearning'))} | {_f(m.get('s_unlearning_trained'))} | "
                    f"{_passes(model_passes(timings, name))} | "
                    f"{_f(timings.get(f'{name}_unlearn_seconds'), '{:.1f}')} |")
    return rows


def model_passes(timings: dict, name: str) -> dict | None:
    """A model's cost in passes: a method's unlearning run, a known-removed model's pretraining run."""
    return timings.get(f"{name}_unlearn_passes") or timings.get(f"{name}_pretrain_passes")


def _passes(p: dict | None) -> str:
    return "-" if not p else f"{p['forwards']}/{p['backwards']}"


def cost_table(results: dict) -> list[str]:
    """Each method's unlearning cost, the mean over seeds: forward and backward passes, the tokens they processed
    (rows times positions), and seconds; the known-removed models' cost is their whole pretraining run."""
    costs: dict[str, list[tuple[dict, float | None]]] = {}
    for res in results.values():
        timings = res.get("timings", {})
        for name in res["metrics"]:
            p = model_passes(timings, name)
            if p:
                costs.setdefault(name, []).append((p, timings.get(f"{name}_unlearn_seconds")))
    rows = ["| model | what | forwards | backwards | forward tokens | backward tokens | seconds |", "|" + "---|" * 7]
    for name, runs in sorted(costs.items(), key=lambda kv: sum(p["forward_tokens"] for p, _ in kv[1])):
        mean = {k: sum(p[k] for p, _ in runs) / len(runs) for k in runs[0][0]}
        secs = [s for _, s in runs if s is not None]
        what = "pretraining (every step)" if name in KNOWN_REMOVED else "unlearning"
        rows.append(f"| {name} | {what} | {mean['forwards']:.0f} | {mean['backwards']:.0f} | "
                    f"{mean['forward_tokens']:.0f} | {mean['backward_tokens']:.0f} | "
                    f"{_f(sum(secs) / len(secs) if secs else None, '{:.1f}')} |")
    return rows


def frontier_section(results: dict, png: Path) -> list[str]:
    """The frontier over the seeds (:mod:`obliviate.evidence.frontier`): the figure ``png`` (one point per model
    per seed) and a table per model: each seed's cost share, worst calibrated recovery (and its attack),
    neighbour keep and verdict."""
    points = {label: frontier_points(res) for label, res in results.items()}
    left = plot_frontier(points, png)
    rows = ["| model | seed | cost (share of retraining) | worst calibrated recovery (attack) | neighbour keep | "
            "verdict |", "|" + "---|" * 6]
    names = list(dict.fromkeys(p["model"] for ps in points.values() for p in ps))
    for name in names:
        for label, ps in points.items():
            for p in (p for p in ps if p["model"] == name):
                share = "-" if p["cost_share"] is None else f"{100 * p['cost_share']:.3g}%"
                rec = "-" if p["recovery"] is None else f"{p['recovery']:.2f} ({p['attack']})"
                rows.append(f"| {name} | {label} | {share} | {rec} | {_f(p['neighbour_keep'])} | "
                            f"{p['verdict'] or '(reference)'} |")
    return ["## The frontier: cost as a share of retraining against the worst calibrated recovery", "",
            f"![the frontier]({png.name})", "",
            "Filled markers: the model kept at least 90% of the base model's neighbour score."
            + (f" Not drawn: {'; '.join(left)}." if left else ""), "", *rows]


def run_seeds(out: Path, seeds: list[int], command, tables_only: bool = False) -> dict | int:
    """``obliviate <command(seed, OUT/seed<k>)>`` for each seed not finished yet (its results.json complete), one
    after the other; ``{"seed <k>": results}`` of the finished ones, or the exit status of the first run that
    failed (1 where none is finished). A killed run resumes: a finished seed is read, not run again."""
    results = {}
    for seed in seeds:
        d = out / f"seed{seed}"
        done = d / "results.json"
        if not tables_only and not (done.exists() and json.loads(done.read_text()).get("status") == "complete"):
            cmd = [sys.executable, "-m", "obliviate.cli.main", *command(seed, d)]
            print(" ".join(cmd), flush=True)
            t = time.time()
            rc = subprocess.run(cmd).returncode
            if rc != 0:
                print(f"seed {seed}: {cmd[3]} failed (exit {rc}); its error is above", file=sys.stderr)
                return rc
            print(f"seed {seed}: {time.time() - t:.0f} s", flush=True)
        if done.exists():
            results[f"seed {seed}"] = json.loads(done.read_text())
    if not results:
        print(f"no finished seed under {out}", file=sys.stderr)
        return 1
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/robustness")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--attacks", default="all")
    p.add_argument("--methods", default=METHODS, help=f"comma-separated methods (default: {METHODS})")
    p.add_argument("--title", default="Robustness of the baselines on the world, every attack")
    p.add_argument("--tables-only", action="store_true", help="only write the tables from the finished seeds")
    p.add_argument("overrides", nargs="*", help="config overrides for every compare (after --)")
    args = p.parse_args(argv)
    out = Path(args.out)
    results = run_seeds(out, args.seeds, lambda seed, d: [
        "compare", "--seed", str(seed), "--out", str(d), "--attacks", args.attacks, "--no-progress",
        f"methods=[{args.methods}]", *args.overrides], args.tables_only)
    if isinstance(results, int):
        return results
    md = [f"# {args.title}", "",
          f"Seeds: {', '.join(results)}; per-seed reports: {out}/seed<k>/report.md.", "",
          *robustness_over_seeds(results), "", "## Cost of each method (mean over seeds)", "",
          *cost_table(results)]
    out.mkdir(parents=True, exist_ok=True)
    md += ["", *frontier_section(results, out / "frontier.png")]
    for label, res in results.items():
        md += ["", f"## {label}", "", *per_model_table(res)]
    (out / "robustness.md").write_text("\n".join(md) + "\n")
    write_html(out / "robustness.md", out / "robustness.html", images=["frontier.png"])
    print(f"tables: {out / 'robustness.md'} and {out / 'robustness.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
