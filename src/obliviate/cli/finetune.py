"""``obliviate finetune``: teach a model a task's forget and retain data (TOFU's first step, on any model)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from obliviate.cli.args import add_common, add_eval_args, add_model_args, add_task_args, seeded
from obliviate.cli.inputs import check_out_dir, eval_overrides, input_paths, load_model_args, task_from_args
from obliviate.config import build_config
from obliviate.eval.suite import EvalOptions, eval_kwargs, evaluate_task
from obliviate.methods import preset_name
from obliviate.runs.card import write_model_card
from obliviate.runs.report import plot_loss_curve
from obliviate.runs.results import (input_fingerprint, prepare_out_dir, previous_digest, same_run, task_digest,
                                   write_results)
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.train.finetune import FinetuneConfig, finetune, training_data
from obliviate.utils import seed_everything


@dataclass
class FinetuneCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world``."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)


def cmd_finetune(args) -> None:
    check_out_dir(args.out, input_paths(args))
    cfg = build_config(FinetuneCommandConfig, args.config, args.overrides,
                       base={**seeded(args.seed, ["seed", "finetune.seed"]), "eval": eval_overrides(args)})
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    data = training_data(task, cfg.finetune.data)
    model, tok = load_model_args(args)
    out = prepare_out_dir(args.out)
    digest, before = task_digest(task), previous_digest(out)  # a file edited in place: not resumed, said why
    resume = same_run(out, {"command": "finetune", "config": cfg, "task": task.summary(), "data": digest,
                            "model": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                            **({"adapter": input_fingerprint(args.adapter)} if args.adapter else {})})
    if not resume and before is not None and before != digest:
        print(f"obliviate: {out} holds checkpoints of a run on other data (the task's items changed: {before[:12]} "
              f"-> {digest[:12]}); starting afresh", file=sys.stderr)
    elif not resume:
        print(f"obliviate: {out} holds checkpoints of another run (other config or model); starting afresh",
              file=sys.stderr)
    progress = not args.no_progress
    seed_everything(cfg.seed)
    preset = preset_name(model)
    model, summary = finetune(model, tok, data, cfg.finetune, out / "train", prompt=task.prompt, preset=preset,
                              progress=progress, resume=resume)
    metrics = evaluate_task(model, tok, task, **eval_kwargs(cfg, progress))
    save_trained(model, out / "model", tok)
    if not is_main_process():
        return
    write_model_card(out / "model", base_model=args.model, task=task.name, method="finetune",
                     settings=summary["finetune"], metrics=metrics)
    plot_loss_curve(out / "train" / "metrics.jsonl", out / "loss.png", f"fine-tuning on {task.name}")
    write_results(out, seed=cfg.seed, config=cfg, metrics={"finetuned": metrics}, model_dir=str(out / "model"),
                  base_model_dir=str(args.model), task=task.summary(), finetune=summary["finetune"],
                  data=summary["data"])
    scores = {k: round(v, 4) for k, v in metrics.items() if k.endswith("_score")}
    print(f"fine-tuned on {task.name} ({data.describe()}): {scores}")
    print(f"model: {out / 'model'}")


def register(sub) -> None:
    s = sub.add_parser("finetune", help="teach a model a task's forget and retain data (TOFU's first step)")
    add_common(s)
    add_model_args(s)
    add_task_args(s)
    add_eval_args(s)
    s.set_defaults(fn=cmd_finetune)
