"""Core commands: world, pretrain, eval, demo."""

from __future__ import annotations

import json
import sys

from dataclasses import dataclass, field

from obliviate.cli.main import add_common as _common, seeded as _seeded
from obliviate.cli.benchmarks import add_benchmark_args, run_benchmark_eval
from obliviate.cli.args import (add_eval_args, add_model_args, add_task_args, check_out_dir, eval_overrides,
                                       load_model_args, task_from_args)
from obliviate.cli.unlearn import EvalOptions
from obliviate.config import build_config
from obliviate.eval.suite import evaluate_task
from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.tasks.world import WorldConfig, evaluate_world, generate_world


def cmd_world(args) -> None:
    from obliviate.config import build_config
    from obliviate.runs.results import prepare_out_dir, write_results

    cfg = build_config(WorldConfig, args.config, args.overrides, base={"seed": args.seed})
    out = prepare_out_dir(args.out)
    world = generate_world(cfg)
    world.save(out / "world")
    splits = ("forget", "holdout", "retain", "general", "concept")
    metrics = {f"n_facts_{s}": len(world.facts_by_split(s)) for s in splits}
    docs = world.documents()
    metrics.update(n_documents=len(docs), n_chars=sum(len(d["text"]) for d in docs),
                   n_relearn_paragraphs=len(world.relearn_paragraphs), fingerprint=world.fingerprint())
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics)
    print(f"world written to {out / 'world'} ({metrics['n_documents']} documents)")


def cmd_pretrain(args) -> None:
    from obliviate.config import build_config
    from obliviate.data import encode_documents
    from obliviate.train.pretrain import PretrainConfig, pretrain
    from obliviate.runs.report import plot_loss_curve
    from obliviate.runs.results import prepare_out_dir, same_run, write_results
    from obliviate.train.distributed import is_main_process

    cfg = build_config(PretrainConfig, args.config, args.overrides, base=_seeded(args.seed, ["seed", "world.seed"]))
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the checkpoints, unless they belong to another config.
    same = same_run(out, {"command": "pretrain", "config": cfg})
    if not same and not args.restart:
        print(f"obliviate: {out} holds checkpoints of another run (other config); starting afresh", file=sys.stderr)
    res = pretrain(cfg, out, resume=same and not args.restart, progress=not args.no_progress)
    ds = encode_documents(res["tokenizer"], res["world"].documents(), max_len=cfg.model.max_len)
    metrics = evaluate_world(res["model"], res["tokenizer"], res["world"], ds)
    if not is_main_process():  # under accelerate launch rank 0 writes and prints
        return
    plot_loss_curve(out / "metrics.jsonl", out / "loss.png", "pretraining loss (lm + qa terms)")
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, model_dir=str(out / "model"))
    print(json.dumps({k: round(v, 4) for k, v in metrics.items() if isinstance(v, float)}, indent=1))


@dataclass
class EvalCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world`` (former spelling: the keys without ``world.``)."""
    eval: EvalOptions = field(default_factory=EvalOptions)


def cmd_eval(args) -> None:
    """Evaluate a model on a task (default: the world), or on a benchmark with --benchmark / --data."""
    if run_benchmark_eval(args):
        return
    check_out_dir(args.out, [args.model, args.tokenizer])
    overrides = [o if o.split("=", 1)[0].split(".", 1)[0] in ("seed", "world", "eval") else f"world.{o}"
                 for o in args.overrides or []]  # `eval ... n_forget=3` meant the world's keys
    cfg = build_config(EvalCommandConfig, args.config, overrides, base={"seed": args.seed,
                                                                          "eval": eval_overrides(args)})
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    model, tok = load_model_args(args)
    out = prepare_out_dir(args.out)
    metrics = evaluate_task(model, tok, task, batch_size=cfg.eval.batch_size, max_new_tokens=cfg.eval.max_new_tokens,
                            progress=not args.no_progress)
    write_results(out, seed=cfg.seed, config=cfg, metrics={"model": metrics}, model_dir=str(args.model),
                  task=task.summary())
    print(json.dumps({k: round(v, 4) for k, v in metrics.items() if isinstance(v, float)}, indent=1))


def cmd_demo(args) -> None:
    """The main job: base and oracle, then GradDiff, NPO, SimNPO and RMU, then the attacks, then the report."""
    from obliviate.cli.unlearn import run_compare_command

    run_compare_command(args)


def register(sub) -> None:
    s = sub.add_parser("world", help="generate the synthetic world and save it")
    _common(s)
    s.set_defaults(fn=cmd_world)
    s = sub.add_parser("pretrain", help="pretrain a tiny model on the world")
    _common(s)
    s.add_argument("--restart", action="store_true", help="ignore checkpoints in --out and start again")
    s.set_defaults(fn=cmd_pretrain)
    s = sub.add_parser("eval", help="evaluate a model on a task (default: the world), or on a benchmark with "
                       "--benchmark / --data")
    _common(s)
    add_model_args(s)
    add_task_args(s, shared=False)
    add_eval_args(s)
    add_benchmark_args(s)
    s.set_defaults(fn=cmd_eval)
    s = sub.add_parser("demo", help="the main job: world, base model, unlearning, attacks, report")
    _common(s)
    s.set_defaults(fn=cmd_demo)
