"""``obliviate compare``: every method on one task and base model, against the controls, with a report."""

from __future__ import annotations

import argparse
from pathlib import Path

from obliviate.cli.args import add_cache_arg, add_common, add_model_args, add_task_args, no_cache
from obliviate.cli.inputs import check_out_dir, device_and_dtype, input_paths, load_model_args, task_from_args
from obliviate.config import to_dict
from obliviate.errors import ConfigError
from obliviate.evidence.attack_table import enabled_in
from obliviate.evidence.harness import attack_names
from obliviate.evidence.retain_control import NO_CONTROL, RETAIN_FINETUNE
from obliviate.models.load import load_tokenizer, parameter_count
from obliviate.pipelines.compare.oracle import retain_control_input, verdict_lines
from obliviate.pipelines.compare.run import compare_plan, compare_settings, run_compare_dir
from obliviate.runs.cost import cost_lines


def run_compare_command(args, defaults: dict | None = None) -> dict:
    """``compare`` (and ``demo``, with :data:`~obliviate.pipelines.compare.run.DEMO` as ``defaults``): the
    task of the arguments (the world by default, built from ``pretrain.world``), then
    :func:`~obliviate.pipelines.compare.run.run_compare_dir`."""
    model, oracle = getattr(args, "model", None), getattr(args, "oracle", None)
    control = getattr(args, "control", None)
    if oracle and not model:
        raise ConfigError("--oracle needs --model (without one, compare builds its own oracle)")
    given = [f"--{flag}" for flag in ("device", "dtype", "adapter") if getattr(args, flag, None)]
    if given and not model:
        raise ConfigError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to --model; "
                          "without one, compare pretrains its own tiny models (give --model, or drop it)")
    if model:
        device_and_dtype(args)  # --device cuda without CUDA, float16 training on the CPU: before --out
    untaught = retain_control_input(model, oracle=oracle, control=control,
                                    base_untrained=getattr(args, "base_untrained", None),
                                    allow_hub=getattr(args, "allow_hub", False))
    check_out_dir(args.out, input_paths(args, oracle, untaught))
    cfg = compare_settings(args.seed, args.config, no_cache(args), defaults=defaults,
                           methods=getattr(args, "methods", None), on_a_model=bool(model),
                           attacks=getattr(args, "attacks", None), tune=getattr(args, "tune", False),
                           tuned=getattr(args, "tuned", False))
    task = task_from_args(args, seed=cfg.seed, world=to_dict(cfg.pretrain.world))
    tokenizers = None
    if model and oracle:  # a given oracle shares the base model's vocabulary: checked on the tokenizers alone
        tokenizers = (load_tokenizer(getattr(args, "tokenizer", None) or model, of_model=True),
                      load_tokenizer(oracle),
                      model, oracle)
    # before --out is touched; then says the plan
    plan = compare_plan(cfg, task, model, untaught, oracle=oracle, control=control, tokenizers=tokenizers,
                        model_size=parameter_count(model) if model else None, progress=not args.no_progress)
    ctl_args = argparse.Namespace(**{**vars(args), "tokenizer": getattr(args, "tokenizer", None) or model,
                                     "adapter": None})  # the oracle's model: the base model's tokenizer
    res = run_compare_dir(task, plan, args.out, load=lambda p: load_model_args(args, path=p),
                          load_control=lambda p: load_model_args(ctl_args, path=p))
    print_table(res["metrics"], ["forget_score", "retain_score", "s_unlearning", "relearn_disjoint_acc"])
    print(f"report: {Path(args.out) / 'report.md'} and {Path(args.out) / 'report.html'}")
    for line in cost_lines(res["cost"]):
        print(line)
    for line in verdict_lines(res, model, control):
        print(line)
    return res


def print_table(metrics: dict, cols: list[str]) -> None:
    """One line per model: its name and the values of ``cols`` ("-" where missing)."""
    w = max([len(n) for n in metrics] + [5]) + 2
    print(f"{'model':{w}s} " + " ".join(f"{c:>22s}" for c in cols))
    for name, m in metrics.items():
        vals = [m.get(c) for c in cols]
        print(f"{name:{w}s} " + " ".join(f"{v:22.3f}" if isinstance(v,
                                                                    float) else f"{'-':>22s}" for v in vals))


def add_attacks_arg(s, run: str) -> None:
    """``--attacks a,b,...``: run exactly those attacks (or ``all``); its help names the attacks ``run``
    turns on unless told (``attack``, ``demo`` or ``compare``:
    :func:`~obliviate.evidence.attack_table.enabled_in`)."""
    names = attack_names("all")
    on = enabled_in(run)
    off = [n for n in names if n not in on]
    default = ", ".join(on) if len(on) <= len(off) else "every attack but " + ", ".join(off)
    s.add_argument("--attacks", metavar="NAMES", help="comma-separated attacks to run, or 'all' (default: "
                                                      f"{default}); names: {', '.join(names)}")


def cmd_compare(args) -> None:
    """Every method on one task (the world by default) against the controls
    (:mod:`obliviate.pipelines.compare`)."""
    run_compare_command(args)


def register(sub) -> None:
    s = sub.add_parser("compare", help="several methods on one task and base model, against the controls: "
                                       "table, plots, Markdown and HTML report "
                                       "(default: the world, with its own base model)")
    add_common(s, example="runs.npo.train.lr=1e-4 runs.rmu.params.coef=10")
    add_cache_arg(s)
    add_model_args(s, required=False, help="base model (default: the world's pretrained one, or for another "
                                           "task a tiny model fine-tuned on it)")
    s.add_argument("--oracle", help="with --model: a model that never saw the forget data (the negative "
                                    "control; default: built from the model "
                                    "before it was taught the task, see --control)")
    s.add_argument("--control", choices=[RETAIN_FINETUNE, NO_CONTROL], help="with --model and no --oracle: "
    f"{RETAIN_FINETUNE} (the default wherever the model before it was taught the task is known, from "
    "--base-untrained or --model's model cards) builds the oracle, that model fine-tuned on the retain data "
    "only with the settings the fine-tuned model's card records, kept in the cache of the controls and "
    f"linked at --out/models/oracle_retain; {NO_CONTROL} "
    "builds none (then no attack is calibrated: no verdict)")
    s.add_argument("--base-untrained", help="with --model: the model before it was taught the task, "
                                            "fine-tuned on the retain data only into the oracle (default: "
                                            "the finetune input named by --model's model cards)")
    add_task_args(s)
    add_attacks_arg(s, "compare")
    s.add_argument("--methods", metavar="NAMES", help="comma-separated methods to compare "
                                                      "(case-insensitive), or 'all' (default with --model: "
                                                      "the four baselines graddiff, npo, simnpo, rmu; "
                                                      "without: as the config says, every method; "
                                                      "the config form is methods=[npo,rmu])")
    s.add_argument("--tune", action="store_true", help="run each method at settings chosen for this base "
                                                       "model on a validation split (as obliviate tune), and "
                                                       "score every model on the other items")
    s.add_argument("--tuned", action="store_true", help="run each method at the settings tuned for it on the "
                                                        "world and committed beside it (obliviate/methods/"
                                                        "tuned/<method>.yaml, scripts/tune_all.py); a method "
                                                        "without them runs at its preset")
    s.set_defaults(fn=cmd_compare)
