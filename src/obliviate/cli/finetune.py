"""``obliviate finetune``: teach a model a task's forget and retain data (TOFU's first step, on any model)."""

from __future__ import annotations

from obliviate.cli.args import add_common, add_eval_args, add_model_args, add_task_args, seeded
from obliviate.cli.inputs import (check_out_dir, eval_overrides, input_paths, load_model_args,
                                  model_fingerprint,
                                  task_from_args)
from obliviate.config import build_config
from obliviate.pipelines.finetune import FinetuneRunConfig, check_finetune_inputs, run_finetune


def cmd_finetune(args) -> None:
    check_out_dir(args.out, input_paths(args))
    cfg = build_config(FinetuneRunConfig, args.config, args.overrides,
                       base={**seeded(args.seed, ["seed", "finetune.seed"]), "eval": eval_overrides(args)})
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    check_finetune_inputs(cfg, task)  # before the model is loaded
    model, tok = load_model_args(args)
    _, info = run_finetune(model, tok, task, cfg, args.out, base_model=args.model,
                           progress=not args.no_progress,
                           fingerprint=model_fingerprint(args, "model"))
    for line in info["lines"]:
        print(line)


def register(sub) -> None:
    s = sub.add_parser("finetune", help="teach a model a task's forget and retain data (TOFU's first step)")
    add_common(s)
    add_model_args(s)
    add_task_args(s)
    add_eval_args(s)
    s.set_defaults(fn=cmd_finetune)
