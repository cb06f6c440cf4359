"""``obliviate bench``: step time and peak memory of each method relative to plain fine-tuning."""

from __future__ import annotations

import datetime
import os
import platform

import torch

from obliviate.cli.args import add_common
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.pipelines.bench.run import BenchConfig, bench_table, filtering_table, roofline_text, run_bench
from obliviate.runs.results import atomic_write_text, prepare_out_dir, write_results


def cmd_bench(args) -> None:
    check_out_dir(args.out, [])
    cfg = build_config(BenchConfig, args.config, args.overrides, base={"seed": args.seed})
    out = prepare_out_dir(args.out)
    metrics = run_bench(cfg, progress=not args.no_progress)
    table = roofline_text(metrics) + "\n" + bench_table(metrics)
    if "mid" in metrics:
        table += f"\nAt size `{metrics['mid']['size']}` ({metrics['mid']['timing']['rounds']} interleaved rounds):\n\n"
        table += bench_table(metrics["mid"])
    filtering = filtering_table(metrics)
    if filtering:
        table += "\n" + filtering
    t = metrics.get("timing", {})
    head = (f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores "
            f"({platform.processor() or 'cpu'}), torch {torch.__version__}; device {metrics['device']}, model size "
            f"`{cfg.size}`, batch {cfg.batch_size}. Step-time ratios: median of {t.get('rounds')} interleaved rounds "
            f"({t.get('clock')}), IQR in brackets; converged (IQR within +-{100 * t.get('tolerance', 0):.0f}%): "
            f"{t.get('converged')}.\n\n")
    atomic_write_text(out / "bench.md", head + table + "\n")
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics)
    print(table)


def register(sub) -> None:
    s = sub.add_parser("bench", help="time and memory of one unlearning step per method vs plain fine-tuning, "
                                     "and the data-filtering classifier's throughput vs pretraining's")
    add_common(s)
    s.set_defaults(fn=cmd_bench)
