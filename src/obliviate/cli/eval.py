"""``obliviate eval``: evaluate a model on a task (default: the world), on a benchmark or your own file
(``--benchmark`` / ``--data``), or on lm-evaluation-harness tasks (``--lm-eval``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.cli.args import (EvalOptions, add_common, add_eval_args, add_model_args, add_task_args, check_out_dir,
                                eval_overrides, load_model_args, task_from_args)
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.eval.benchmark import evaluate_examples, load_benchmark_examples
from obliviate.eval.lmeval import require_lm_eval, run_lmeval_tasks
from obliviate.eval.suite import evaluate_task
from obliviate.models.load import check_vocab, load_model
from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results


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


def add_benchmark_args(p) -> None:
    """Options that turn ``obliviate eval`` into a benchmark evaluation."""
    g = p.add_argument_group("benchmark evaluation (instead of the synthetic world)")
    g.add_argument("--benchmark", help="benchmark name, e.g. wmdp_bio, mmlu, mmlu:anatomy, medmcqa, tofu_forget10 "
                                       "(with --data: the name to report the file under)")
    g.add_argument("--data", help="your own file of QA pairs or MCQs (.jsonl, .json, .csv, .tsv)")
    g.add_argument("--kind", choices=["qa", "mcq"], help="what --data holds")
    g.add_argument("--mapping", help="schema_field=file_field pairs for --data or --forget/--retain files, e.g. "
                   "question=prompt,answer=target")
    g.add_argument("--limit", type=int, help="evaluate only the first N examples (of every set of a task)")
    g.add_argument("--lm-eval", metavar="TASKS", help="run lm-evaluation-harness tasks (comma-separated) on the model "
                   "in memory; hub tasks download their data (network), your own task YAMLs work offline")
    g.add_argument("--lm-eval-include", metavar="DIR", help="directory of your own lm-eval task YAMLs")


def run_benchmark_eval(args) -> bool:
    """Run the benchmark evaluation if ``--benchmark`` or ``--data`` was given; else return False.

    Writes ``results.json`` with ``metrics.<benchmark>`` (``accuracy`` for MCQ; ``exact_match``,
    ``rouge_l``, ``prob`` for QA) and the per-example predictions in ``predictions.json``.
    """
    benchmark, data = getattr(args, "benchmark", None), getattr(args, "data", None)
    if getattr(args, "lm_eval", None) or getattr(args, "lm_eval_include", None):
        return run_lmeval_command(args)
    if not benchmark and not data:
        if getattr(args, "kind", None) is not None:
            raise ConfigError("--kind needs --data")
        return False  # the task evaluation (--task / --forget) takes --mapping and --limit too
    if getattr(args, "task", None) or getattr(args, "forget", None):
        raise ConfigError("give either --benchmark/--data or --task/--forget, not both")
    if getattr(args, "config", None):
        raise ConfigError(f"--config {args.config} configures the world evaluation, not --benchmark/--data")
    if getattr(args, "overrides", None):
        raise ConfigError(f"key=value overrides ({' '.join(args.overrides)}) configure the world evaluation, "
                          "not --benchmark/--data")
    # A bad name, file or mapping fails here, before the model is loaded.
    name, kind, examples = load_benchmark_examples(benchmark, data=data, kind=args.kind, mapping=args.mapping,
                                                   limit=args.limit)
    model = load_model(args.model)
    tok = ensure_pad_token(load_tokenizer(args.tokenizer or args.model), policy=args.pad_policy)
    check_vocab(model, tok, args.model, args.tokenizer)
    out = prepare_out_dir(args.out)
    res = evaluate_examples(model, tok, kind, examples)
    per_example = res.pop("per_example")
    atomic_write_json(out / "predictions.json", {name: per_example})
    config = {"benchmark": name, "kind": kind, "data": data, "mapping": args.mapping, "limit": args.limit,
              "model": args.model, "tokenizer": args.tokenizer or args.model}
    write_results(out, seed=args.seed, config=config, metrics={name: res})
    print(json.dumps({name: {k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}}, indent=1))
    return True


def run_lmeval_command(args) -> bool:
    """``obliviate eval --lm-eval TASKS``: lm-eval's numbers for the model, in ``results.json`` under ``metrics.lm_eval``."""
    if not args.lm_eval:
        raise ConfigError("--lm-eval-include needs --lm-eval TASKS")
    for opt in ("benchmark", "data", "task", "forget", "config", "overrides"):
        if getattr(args, opt, None):
            raise ConfigError(f"--lm-eval runs lm-eval's own tasks; it does not take --{opt.replace('_', '-')}")
    tasks = [t.strip() for t in args.lm_eval.split(",") if t.strip()]
    if not tasks:
        raise ConfigError(f"--lm-eval: no task names in {args.lm_eval!r}")
    if args.lm_eval_include and not Path(args.lm_eval_include).is_dir():
        raise ConfigError(f"--lm-eval-include: no such directory: {args.lm_eval_include}")
    require_lm_eval()  # a missing lm-eval fails before the model is loaded
    model = load_model(args.model)
    tok = ensure_pad_token(load_tokenizer(args.tokenizer or args.model), policy=args.pad_policy)
    check_vocab(model, tok, args.model, args.tokenizer)
    out = prepare_out_dir(args.out)
    res = run_lmeval_tasks(model, tok, tasks, include_path=args.lm_eval_include, limit=args.limit)
    config = {"lm_eval": tasks, "include": args.lm_eval_include, "limit": args.limit, "model": args.model,
              "tokenizer": args.tokenizer or args.model}
    write_results(out, seed=args.seed, config=config, metrics={"lm_eval": res})
    print(json.dumps(res, indent=1))
    return True


def register(sub) -> None:
    s = sub.add_parser("eval", help="evaluate a model on a task (default: the world), or on a benchmark with "
                       "--benchmark / --data")
    add_common(s)
    add_model_args(s)
    add_task_args(s, shared=False)
    add_eval_args(s)
    add_benchmark_args(s)
    s.set_defaults(fn=cmd_eval)
