"""Issue #41: are the positive controls selective? On each world seed, the base model that ``obliviate compare``
pretrains (cached, :func:`obliviate.train.pretrain.cached_pretrain`) and both positive controls
(:func:`~obliviate.evidence.controls.suppression_control`, :func:`~obliviate.evidence.controls.small_norm_control`)
at their defaults (or ``--refusal`` / ``--smallnorm`` keyword arguments, JSON), each scored with the task's whole
evaluation (forget, retain and neighbour scores) beside each control's own keep ratios (``info["keep"]``: the
neighbour one on the neighbour items it did not train on) and, for the small-norm control, its int4
round-to-nearest copy (does quantization give the forget answers back?). One torch thread, as ``compare`` builds them.
Writes ``OUT/selectivity.jsonl`` (a row per seed and model) and prints a markdown table.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/control_selectivity.py --seeds 0 1 2 3 --out /tmp/sel
    .venv/bin/python scripts/control_selectivity.py --table /tmp/sel/selectivity.jsonl   # the table again
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from obliviate.attacks.quantize import quantized_copy
from obliviate.eval.suite import evaluate_task
from obliviate.evidence.controls import small_norm_control, suppression_control
from obliviate.models.load import load_model, load_tokenizer
from obliviate.tasks.world import task_from_world
from obliviate.train.pretrain import PretrainConfig, cached_pretrain
from obliviate.world import WorldConfig, generate_world

ROLES = ("forget_score", "retain_score", "neighbour_score")


def scores(model, tok, task) -> dict:
    m = evaluate_task(model, tok, task)
    return {k: m.get(k) for k in ROLES}


def run_seed(seed: int, refusal: dict, smallnorm: dict, which: list[str]) -> list[dict]:
    task = task_from_world(generate_world(WorldConfig(seed=seed)))
    t = time.time()
    root = cached_pretrain(PretrainConfig(seed=seed, world=WorldConfig(seed=seed)), progress=False)
    base, tok = load_model(root / "model"), load_tokenizer(root / "model")
    rows = [{"seed": seed, "model": "base", **scores(base, tok, task), "seconds": time.time() - t}]
    builders = {"positive_control": (suppression_control, refusal),
                "positive_control_smallnorm": (small_norm_control, smallnorm)}
    for name in which:
        build, kw = builders[name]
        t = time.time()
        control, info = build(base, tok, task, seed=0, **kw)
        seconds = time.time() - t
        row = {"seed": seed, "model": name, **scores(control, tok, task), "seconds": seconds,
               "steps": info["steps"], "keep": info.get("keep"), "args": kw,
               "curve": info.get("curve")}
        if name == "positive_control_smallnorm":
            row["int4_forget_score"] = scores(quantized_copy(control, "int4"), tok, task)["forget_score"]
            row["update_rel_norm"] = info["update_rel_norm"]
        b = rows[0]
        row["ratio"] = {k: (row[k] / b[k] if b[k] else None) for k in ("retain_score", "neighbour_score")}
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    head = ("| seed | model | forget | retain (ratio) | neighbour (ratio) | keep: retain, held-out neighbour | "
            "int4 forget | steps | seconds |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        rr = r.get("ratio") or {}
        f = lambda k: f"{r[k]:.2f}" + (f" ({rr[k]:.2f})" if rr.get(k) is not None else "")
        q, keep = r.get("int4_forget_score"), r.get("keep") or {}
        kept = ", ".join("n/a" if keep.get(k) is None else f"{keep[k]:.2f}" for k in ("retain", "neighbour")) \
            if keep else ""
        lines.append(f"| {r['seed']} | {r['model']} | {r['forget_score']:.2f} | {f('retain_score')} | "
                     f"{f('neighbour_score')} | {kept} | {'' if q is None else f'{q:.2f}'} | {r.get('steps', '')} | "
                     f"{r['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--refusal", type=json.loads, default={}, help="suppression_control kwargs (JSON)")
    ap.add_argument("--smallnorm", type=json.loads, default={}, help="small_norm_control kwargs (JSON)")
    ap.add_argument("--table", type=Path, help="only print the table of this selectivity.jsonl")
    ap.add_argument("--only", choices=["positive_control", "positive_control_smallnorm"], nargs="+",
                    default=["positive_control", "positive_control_smallnorm"])
    args = ap.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    torch.set_num_threads(1)
    if args.out is None:
        ap.error("--out is required (or --table FILE)")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        these = run_seed(seed, args.refusal, args.smallnorm, args.only)
        with open(args.out / "selectivity.jsonl", "a") as f:
            for r in these:
                f.write(json.dumps(r, default=str) + "\n")
        rows += these
        print(table(these), flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
