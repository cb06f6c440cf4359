"""``obliviate tune``: choose a method's lr, steps and own weight for a model and task under a retain constraint."""

from __future__ import annotations

from obliviate.cli.args import add_common, add_eval_args, add_model_args, add_task_args
from obliviate.cli.unlearn import checked_run, run_tuning
from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.train.distributed import is_main_process


def cmd_tune(args) -> None:
    method, cfg, task, model, tok, preset, split = checked_run(args, tuning=True)
    out = prepare_out_dir(args.out)
    result = run_tuning(args, cfg, model, tok, split, out, not args.no_progress)
    if is_main_process():
        write_results(out, seed=cfg.seed, config=cfg, metrics={"base": result["base"]}, task=split[0].summary(),
                      preset=preset, tune=result, preset_file=str(out / "preset.yaml"))
    print(f"use it: obliviate unlearn --method {method} --config {out / 'preset.yaml'} (with the same model and task)")


def register(sub) -> None:
    s = sub.add_parser("tune", help="choose a method's settings for a model and task: the largest forget drop "
                       "that keeps retain, on a validation split; writes a preset for unlearn --config")
    add_common(s)
    add_model_args(s, help="the model to tune for: a directory or hub id")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`; case-insensitive)")
    add_task_args(s)
    add_eval_args(s)
    s.set_defaults(fn=cmd_tune, tune=True)
