"""``obliviate eval``: evaluate a model on a task (default: the world; ``--benchmark NAME`` is the task
``benchmark:NAME``, ``--data FILE`` a benchmark task of your file), or on lm-evaluation-harness tasks
(``--lm-eval``)."""

from __future__ import annotations

import json
from pathlib import Path

from obliviate.cli.args import (MAPPING_HELP, add_common, add_eval_args, add_model_args, add_task_args,
                                count_arg)
from obliviate.cli.inputs import (check_out_dir, eval_overrides, input_paths, load_model_args,
                                  mapping_from_args,
                                  task_from_args)
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.eval.lmeval import require_lm_eval
from obliviate.eval.metric import asking_for
from obliviate.pipelines.evaluate import EvalRunConfig, run_eval, run_lmeval
from obliviate.tasks.benchmark import benchmark_task
from obliviate.utils import recorded_path


def cmd_eval(args) -> None:
    """Evaluate a model on a task (default: the world); ``--benchmark`` / ``--data`` name a benchmark task."""
    if run_benchmark_eval(args):
        return
    check_out_dir(args.out, input_paths(args))  # --data too: never written over
    overrides = [o if o.split("=", 1)[0].split(".", 1)[0] in ("seed", "world", "eval") else f"world.{o}"
                 for o in args.overrides or []]  # `eval ... n_forget=3` meant the world's keys
    cfg = build_config(EvalRunConfig, args.config, overrides,
                       base={"seed": args.seed, "eval": eval_overrides(args)})
    evaluate_and_write(args, cfg, task_from_args(args, seed=cfg.seed, world=cfg.world))


def evaluate_and_write(args, cfg: EvalRunConfig, task) -> dict:
    """The evaluation of ``eval``: ``--model`` on ``task`` (:func:`~obliviate.pipelines.evaluate.run_eval`),
    with the registered metrics ``--metrics`` names too (checked before the model is loaded)."""
    if getattr(args, "metrics", None) is not None:
        task = asking_for(task, args.metrics.split(","))
    model, tok = load_model_args(args, trains=False)
    metrics, lines = run_eval(model, tok, task, cfg, args.out, model_dir=str(args.model),
                              progress=not getattr(args, "no_progress", False))
    for line in lines:
        print(line)
    return metrics


def add_benchmark_args(p) -> None:
    """Options that name a benchmark task for ``obliviate eval`` (``--benchmark NAME`` = ``--task
    benchmark:NAME``)."""
    g = p.add_argument_group("benchmark evaluation (instead of the synthetic world)")
    g.add_argument("--benchmark", help="benchmark name, e.g. wmdp_bio, mmlu, mmlu:anatomy, medmcqa, "
                                       "tofu_forget10: the same as --task benchmark:NAME (with --data: the "
                                       "name to report the file under)")
    g.add_argument("--data", help="your own file of QA pairs or MCQs (.jsonl, "
                                  ".json, .csv, .tsv), evaluated as a benchmark task")
    g.add_argument("--kind", choices=["qa", "mcq"], help="what --data holds (default: told from its fields, "
                                                         "as for --utility files)")
    g.add_argument("--mapping", action="append", metavar="[FILE=]FIELDS",
                   help="schema_field=file_field pairs for "
                   "--data, e.g. question=prompt,answer=target; for --forget/--retain files: " + MAPPING_HELP)
    g.add_argument("--limit", type=count_arg, help="evaluate only the first N "
                                                   "examples (of every set of a task)")
    g.add_argument("--lm-eval", metavar="TASKS", help="run lm-evaluation-harness tasks (comma-separated) on "
                                                      "the model in memory; hub tasks download their data "
                                                      "(network), your own task YAMLs work offline")
    g.add_argument("--lm-eval-include", metavar="DIR", help="directory of your own lm-eval task YAMLs")


def run_benchmark_eval(args) -> bool:
    """The evaluation of the benchmark task named by ``--benchmark`` or ``--data`` (through
    :func:`evaluate_and_write`, as ``--task benchmark:NAME``), or of ``--lm-eval``; False when none is given.
    Config keys other than ``seed`` and ``eval.*`` configure the world and are refused."""
    benchmark, data = getattr(args, "benchmark", None), getattr(args, "data", None)
    if getattr(args, "lm_eval", None) or getattr(args, "lm_eval_include", None):
        return run_lmeval_command(args)
    if not benchmark and not data:
        if getattr(args, "kind", None) is not None:
            raise ConfigError("--kind needs --data")
        return False  # the task evaluation (--task / --forget) takes --mapping and --limit too
    if getattr(args, "task", None) or getattr(args, "forget", None):
        raise ConfigError("give either --benchmark/--data or --task/--forget, not both")
    world = [o for o in args.overrides or [] if o.split("=", 1)[0].split(".", 1)[0] not in ("seed", "eval")]
    if world:
        raise ConfigError(f"key=value overrides ({' '.join(world)}) configure "
                          "the world evaluation, not --benchmark/--data")
    check_out_dir(args.out, input_paths(args))  # --data too: never written over
    cfg = build_config(EvalRunConfig, args.config, args.overrides,
                       base={"seed": args.seed, "eval": eval_overrides(args)})
    if cfg.world:
        raise ConfigError(f"--config {args.config} sets world keys, which "
                          "configure the world evaluation, not --benchmark/--data")
    # A bad name, file or mapping fails here, before the model is loaded.
    mapping = mapping_from_args(args.mapping, {"data": [data]} if data else {})
    hub = {"allow_hub": True} if getattr(args, "allow_hub", False) and not data else {}
    task = benchmark_task(benchmark, data=data, kind=args.kind, limit=args.limit,
                          mapping=mapping.get(data) if isinstance(mapping, dict) else mapping, **hub)
    evaluate_and_write(args, cfg, task)
    return True


def run_lmeval_command(args) -> bool:
    """``obliviate eval --lm-eval TASKS``: lm-eval's numbers for the model, in ``results.json`` under
    ``metrics.lm_eval``."""
    if not args.lm_eval:
        raise ConfigError("--lm-eval-include needs --lm-eval TASKS")
    for opt in ("benchmark", "data", "task", "forget", "config", "overrides", "metrics"):
        if getattr(args, opt, None):
            raise ConfigError("--lm-eval runs lm-eval's own tasks; it does not take "
                              f"--{opt.replace('_', '-')}")
    tasks = [t.strip() for t in args.lm_eval.split(",") if t.strip()]
    if not tasks:
        raise ConfigError(f"--lm-eval: no task names in {args.lm_eval!r}")
    if args.lm_eval_include and not Path(args.lm_eval_include).is_dir():
        raise ConfigError(f"--lm-eval-include: no such directory: {args.lm_eval_include}")
    check_out_dir(args.out, input_paths(args, args.lm_eval_include))
    require_lm_eval()  # a missing lm-eval fails before the model is loaded
    model, tok = load_model_args(args, trains=False)  # on --device, in --dtype, with --adapter
    config = {"lm_eval": tasks, "include": recorded_path(args.lm_eval_include), "limit": args.limit,
              "model": recorded_path(args.model), "tokenizer": recorded_path(args.tokenizer or args.model)}
    res = run_lmeval(model, tok, tasks, args.out, seed=args.seed, include=args.lm_eval_include,
                     limit=args.limit,
                     config=config)
    print(json.dumps(res, indent=1))
    return True


def register(sub) -> None:
    s = sub.add_parser("eval", help="evaluate a model on a task (default: the world), "
                                    "or on a benchmark with --benchmark / --data")
    add_common(s)
    add_model_args(s)
    add_task_args(s, shared=False)
    add_eval_args(s)
    add_benchmark_args(s)
    s.add_argument("--metrics", metavar="NAMES", help="registered metrics to add, comma-separated, e.g. "
                                                      "mia_loss,mia_min_k,extraction_strength (the MIAs need "
                                                      "a holdout: --holdout FILE); one whose data the task "
                                                      "lacks is left out with a line "
                                                      "saying why (docs/evaluation.md)")
    s.set_defaults(fn=cmd_eval)
