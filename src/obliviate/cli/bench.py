"""``obliviate bench``: step time and peak memory of each method relative to plain fine-tuning."""

from __future__ import annotations

from obliviate.cli.args import add_common
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.pipelines.bench.run import BenchConfig, run_bench_dir


def cmd_bench(args) -> None:
    check_out_dir(args.out, [])
    cfg = build_config(BenchConfig, args.config, args.overrides, base={"seed": args.seed})
    print(run_bench_dir(cfg, args.out, progress=not args.no_progress)[1])


def register(sub) -> None:
    s = sub.add_parser("bench", help="time and memory of one unlearning step per method vs plain "
                                     "fine-tuning, and the data-filtering "
                                     "classifier's throughput vs pretraining's")
    add_common(s)
    s.set_defaults(fn=cmd_bench)
