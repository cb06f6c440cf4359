"""``obliviate pretrain``: pretrain a tiny model on the world (resumable)."""

from __future__ import annotations

import json
import sys

from obliviate.cli.args import add_common, seeded
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.eval.suite import evaluate_task
from obliviate.runs.report import plot_loss_curve
from obliviate.runs.results import prepare_out_dir, same_run, write_results
from obliviate.tasks.world import task_from_world
from obliviate.train.distributed import is_main_process
from obliviate.train.pretrain import PretrainConfig, pretrain


def cmd_pretrain(args) -> None:
    check_out_dir(args.out, [])
    cfg = build_config(PretrainConfig, args.config, args.overrides, base=seeded(args.seed, ["seed", "world.seed"]))
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the checkpoints, unless they belong to another config.
    same = same_run(out, {"command": "pretrain", "config": cfg})
    if not same and not args.restart:
        print(f"obliviate: {out} holds checkpoints of another run (other config); starting afresh", file=sys.stderr)
    res = pretrain(cfg, out, resume=same and not args.restart, progress=not args.no_progress)
    metrics = evaluate_task(res["model"], res["tokenizer"], task_from_world(res["world"]),
                            progress=not args.no_progress)
    if not is_main_process():  # under accelerate launch rank 0 writes and prints
        return
    plot_loss_curve(out / "metrics.jsonl", out / "loss.png", "pretraining loss (lm + qa terms)")
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, model_dir=str(out / "model"))
    print(json.dumps({k: round(v, 4) for k, v in metrics.items() if isinstance(v, float)}, indent=1))


def register(sub) -> None:
    s = sub.add_parser("pretrain", help="pretrain a tiny model on the world")
    add_common(s)
    s.add_argument("--restart", action="store_true", help="ignore checkpoints in --out and start again")
    s.set_defaults(fn=cmd_pretrain)
