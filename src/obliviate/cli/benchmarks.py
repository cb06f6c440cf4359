"""Benchmark commands: ``obliviate tofu`` and the ``--benchmark`` / ``--data`` options of ``obliviate eval``.

``obliviate eval`` is defined in :mod:`obliviate.cli.core`; it calls
:func:`add_benchmark_args` on its parser and, first thing in its handler,
``if run_benchmark_eval(args): return``.
"""

from __future__ import annotations

import json
from pathlib import Path

from obliviate.cli.main import add_common


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
    from obliviate.errors import ConfigError
    from obliviate.eval.benchmark import evaluate_examples, load_benchmark_examples
    from obliviate.models.load import check_vocab, load_model
    from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
    from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results

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
    from obliviate.errors import ConfigError
    from obliviate.eval.lmeval import _lm_eval, run_lmeval_tasks
    from obliviate.models.load import check_vocab, load_model
    from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
    from obliviate.runs.results import prepare_out_dir, write_results

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
    _lm_eval()  # a missing lm-eval fails before the model is loaded
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


def cmd_tofu(args) -> None:
    from obliviate.config import build_config
    from obliviate.errors import ConfigError
    from obliviate.runs.results import prepare_out_dir
    from obliviate.eval.tofu import TINY_SCALE_NOTE
    from obliviate.recipes.tofu import GivenModels, TofuConfig, check_run, run_tofu

    given = None
    if args.model:
        if not args.retain_model:
            raise ConfigError("--model needs --retain-model (the TOFU retain model, trained without the forget "
                              "split: forget quality is measured against it)")
        given = GivenModels(args.model, args.retain_model, args.tokenizer, args.pad_policy or "error")
    else:
        for opt in ("retain_model", "tokenizer", "pad_policy"):
            if getattr(args, opt) is not None:
                raise ConfigError(f"--{opt.replace('_', '-')} needs --model")
    base = {"seed": args.seed, **({"method": args.method} if args.method else {}),
            **({"forget": args.forget} if args.forget else {})}
    cfg = build_config(TofuConfig, args.config, args.overrides, base=base)
    check_run(cfg, args.out, given)  # before the output directory is touched
    out = prepare_out_dir(args.out)
    res = run_tofu(cfg, out, progress=not args.no_progress, given=given)
    m, rouge = res["metrics"], f"{cfg.forget}_rouge_l"
    print(f"base {cfg.forget} ROUGE-L {m['base'][rouge]:.3f} (retain-only model {m['retain_model'][rouge]:.3f})")
    for key in ("forget_quality", "model_utility", "retain_utility", rouge):
        print(f"{cfg.method}: {key} {m['base'].get(key, float('nan')):.4g} -> {m[cfg.method][key]:.4g}")
    if given is None:
        print(f"note: {TINY_SCALE_NOTE}")
    print(f"results: {out / 'results.json'}")


def register(sub) -> None:
    s = sub.add_parser("tofu", help="TOFU: fine-tune tiny models on full and the retain split (or start from "
                                    "--model and --retain-model), unlearn the forget split, report forget quality "
                                    "and model utility")
    add_common(s)
    s.add_argument("--method", help="unlearning method (see `obliviate methods`); default: the config's (graddiff)")
    s.add_argument("--forget", help="forget split: forget01, forget05 or forget10 (default; retain split retain99, "
                                    "retain95, retain90)")
    g = s.add_argument_group("given models (instead of training tiny ones)")
    g.add_argument("--model", help="model fine-tuned on TOFU full (directory or hub id): evaluated and unlearned")
    g.add_argument("--retain-model", help="the same base fine-tuned on the retain split only (directory or hub id); "
                                          "required with --model")
    g.add_argument("--tokenizer", help="tokenizer directory or hub id, if not the model's")
    g.add_argument("--pad-policy", choices=["error", "eos"], help="what to do when the tokenizer has no pad token "
                                                                  "(default: error)")
    s.set_defaults(fn=cmd_tofu)
