"""``obliviate compare``: every method on one task and base model, against the controls, with a report."""

from __future__ import annotations

import argparse
import sys

from obliviate.attacks.harness import attack_names
from obliviate.attacks.positive_controls import NO_NEGATIVE_CONTROL, UNTAUGHT_HINT, no_verdict_line
from obliviate.attacks.retain_control import NO_CONTROL, RETAIN_FINETUNE, retain_finetune_control
from obliviate.attacks.verdict import verdict_line
from obliviate.cli.args import (add_common, add_model_args, add_task_args, check_out_dir, device_and_dtype, input_paths,
                                load_model_args, seeded, task_from_args)
from obliviate.config import build_config, deep_merge, to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.methods import preset_name
from obliviate.unlearning.engine import check_method_runs
from obliviate.pipelines.compare.run import (CompareConfig, check_retain, compared_methods, methods_option, plan_line,
                                             run_compare)
from obliviate.runs.card import untaught_model
from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.train.finetune import training_data


def run_compare_command(args, defaults: dict | None = None) -> dict:
    """``compare`` (and ``demo``, with :data:`~obliviate.pipelines.compare.run.DEMO` as ``defaults``): the task of
    the arguments (the world by default, built from ``pretrain.world``), then :func:`run_compare`."""
    base = deep_merge(defaults or {}, seeded(args.seed, ["seed", "pretrain.seed", "pretrain.world.seed",
                                                         "attacks.seed"]))
    model, oracle = getattr(args, "model", None), getattr(args, "oracle", None)
    if oracle and not model:
        raise ConfigError("--oracle needs --model (without one, compare builds its own oracle)")
    given = [f"--{flag}" for flag in ("device", "dtype", "adapter") if getattr(args, flag, None)]
    if given and not model:
        raise ConfigError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to --model; without "
                          "one, compare pretrains its own tiny models (give --model, or drop it)")
    if model:
        device_and_dtype(args)  # --device cuda without CUDA, float16 training on the CPU: before --out
    untaught = retain_control_input(args)
    check_out_dir(args.out, input_paths(args, oracle, untaught))
    if getattr(args, "tune", False):
        base["tune"] = True
    methods = methods_option(getattr(args, "methods", None), on_a_model=bool(model))
    if methods is not None:  # the flag (or, on a user's model, the four baselines); methods=[...] in --config wins
        base["methods"] = methods
    if getattr(args, "attacks", None):  # an unknown name fails here, in one line, before --out
        base = deep_merge(base, {"attacks": {"select": attack_names(args.attacks)}})
    cfg = build_config(CompareConfig, args.config, args.overrides, base=base)
    task = task_from_args(args, seed=cfg.seed, world=to_dict(cfg.pretrain.world))
    cfg.attacks.relearn.progress = not args.no_progress
    check_method_runs(cfg.runs, compared_methods(cfg))  # before --out
    check_retain(task, compared_methods(cfg), model)
    if untaught and not has_retain_data(task, args):  # asked for, it fails in one line before --out is touched
        untaught = None
    print(plan_line(cfg, task))
    out = prepare_out_dir(args.out)
    if untaught:  # the oracle (negative control) obliviate builds: the untaught model taught the retain data only
        print(f"obliviate: oracle: {untaught} fine-tuned on the retain data only (cached in "
              f"{out / 'models' / 'oracle_retain'})"
              + ("" if getattr(args, "control", None) else f"; the default: --oracle DIR gives one, --control "
                                                           f"{NO_CONTROL} none"),
              file=sys.stderr)
        ctl_args = argparse.Namespace(**{**vars(args), "tokenizer": args.tokenizer or model, "adapter": None})
        oracle, _ = retain_finetune_control(untaught, model, task, out / "models" / "oracle_retain",
                                            lambda p: load_model_args(ctl_args, path=p), preset=preset_name,
                                            seed=cfg.seed, progress=not args.no_progress)
    elif model and not oracle:  # said now, before the run, and again as its last line
        print(f"obliviate: {missing_oracle(args)}", file=sys.stderr)
    res = run_compare(task, cfg, out, model_dir=model, oracle_dir=oracle,
                      load=(lambda p: load_model_args(args, path=p)) if model else None,
                      progress=not args.no_progress)
    write_results(out, seed=cfg.seed, config=cfg, metrics=res["metrics"], method_settings=res["configs"],
                  timings=res["timings"], task=task.summary(), model_dirs=res["model_dirs"],
                  robustness=res["robustness"], skipped=res["skipped"], trust=res["trust"],
                  **({"tuned": res["tuned"]} if "tuned" in res else {}))
    print_table(res["metrics"], ["forget_score", "retain_score", "s_unlearning", "relearn_disjoint_acc"])
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")
    for line in verdict_lines(res, args):
        print(line)
    return res


def has_retain_data(task, args) -> bool:
    """Whether ``task`` has retain data to build the oracle from: with ``--control retain-finetune`` a task without
    fails (one line); by default the oracle is then not built, said on stderr."""
    try:
        training_data(task, "retain")
    except DataError:
        if getattr(args, "control", None) == RETAIN_FINETUNE:
            raise
        print(f"obliviate: task {task.name!r} has no retain data to fine-tune the model before it was taught the task "
              "on: no oracle is built", file=sys.stderr)
        return False
    return True


def missing_oracle(args) -> str:
    """The one line of a comparison with no negative control: no verdict, and what adds one."""
    if not getattr(args, "model", None):
        return no_verdict_line(NO_NEGATIVE_CONTROL, "oracle=true (compare builds its oracle beside its base model)")
    add = f"--oracle DIR (a model that never saw the forget data), or {UNTAUGHT_HINT}"
    if getattr(args, "control", None) == NO_CONTROL:
        add += f" and drop --control {NO_CONTROL}"
    return no_verdict_line(NO_NEGATIVE_CONTROL, add)


def verdict_lines(res: dict, args) -> list[str]:
    """What a comparison ends with: one verdict line per method (``verdict: <method>: <verdict> (<attack>,
    calibrated on <control>): <reason>``), or without a negative control one line saying what to add."""
    if "oracle" not in res["metrics"]:
        return [missing_oracle(args)]
    return [verdict_line(f"verdict: {name}", v) for name, v in res["robustness"]["verdicts"].items()]


def retain_control_input(args) -> str | None:
    """The model compare fine-tunes on the retain data only to build the oracle (the negative control) beside
    ``--model``: ``--base-untrained``, else the finetune input named by ``--model``'s cards. By default it is
    built whenever that model is known and no ``--oracle`` is given; ``--control retain-finetune`` requires it
    (one line without), ``--control none`` builds none. None when there is none to build."""
    control, untrained = getattr(args, "control", None), getattr(args, "base_untrained", None)
    if control == NO_CONTROL:
        if untrained:
            raise ConfigError(f"--base-untrained is what the oracle is built from, and --control {NO_CONTROL} builds "
                              "none: give one of them")
        if not args.model or args.oracle:
            raise ConfigError(f"--control {NO_CONTROL} applies to --model without --oracle (without --model, compare "
                              "builds its own oracle: oracle=false skips it)")
        return None
    if control is None:  # the default: build it where it can be built
        if not getattr(args, "model", None) or getattr(args, "oracle", None):
            if untrained:
                raise ConfigError("--base-untrained builds the oracle beside --model: give --model and no --oracle "
                                  "(without --model, compare builds its own oracle)")
            return None
        return untrained or untaught_model(args.model)
    if not args.model or args.oracle:
        raise ConfigError(f"--control {RETAIN_FINETUNE} builds the oracle beside --model: give --model and no --oracle "
                          "(without --model, compare builds its own retain-only oracle)")
    untaught = args.base_untrained or untaught_model(args.model)
    if untaught is None:
        raise ConfigError(f"--control {RETAIN_FINETUNE} fine-tunes the model before it was taught the task on the "
                          "retain data, and none is known: give --base-untrained DIR (no model card of --model names "
                          "an `obliviate finetune` input)")
    return untaught


def print_table(metrics: dict, cols: list[str]) -> None:
    """One line per model: its name and the values of ``cols`` ("-" where missing)."""
    w = max([len(n) for n in metrics] + [5]) + 2
    print(f"{'model':{w}s} " + " ".join(f"{c:>22s}" for c in cols))
    for name, m in metrics.items():
        vals = [m.get(c) for c in cols]
        print(f"{name:{w}s} " + " ".join(f"{v:22.3f}" if isinstance(v, float) else f"{'-':>22s}" for v in vals))


def add_attacks_arg(s, default: str) -> None:
    """``--attacks a,b,...``: run exactly those attacks (or ``all``)."""
    s.add_argument("--attacks", metavar="NAMES", help=f"comma-separated attacks to run, or 'all' (default: {default}); "
                   f"names: {', '.join(attack_names('all'))}")


def cmd_compare(args) -> None:
    """Every method on one task (the world by default) against the controls (:mod:`obliviate.pipelines.compare`)."""
    run_compare_command(args)


def register(sub) -> None:
    s = sub.add_parser("compare", help="several methods on one task and base model, against the controls: table, "
                       "plots, Markdown and HTML report (default: the world, with its own base model)")
    add_common(s)
    add_model_args(s, required=False, help="base model (default: the world's pretrained one, or for another task a "
                   "tiny model fine-tuned on it)")
    s.add_argument("--oracle", help="with --model: a model that never saw the forget data (the negative control; "
                   "default: built from the model before it was taught the task, see --control)")
    s.add_argument("--control", choices=[RETAIN_FINETUNE, NO_CONTROL], help=f"with --model and no --oracle: "
                   f"{RETAIN_FINETUNE} (the default wherever the model before it was taught the task is known, from "
                   "--base-untrained or --model's model cards) builds the oracle, that model fine-tuned on the retain "
                   "data only with the settings the fine-tuned model's card records, cached under "
                   f"--out/models/oracle_retain; {NO_CONTROL} builds none (then no attack is calibrated: no verdict)")
    s.add_argument("--base-untrained", help="with --model: the model before it was taught the task, fine-tuned on the "
                   "retain data only into the oracle (default: the finetune input named by --model's model cards)")
    add_task_args(s)
    add_attacks_arg(s, "every attack but gcg and gcg_prefix")
    s.add_argument("--methods", metavar="NAMES", help="comma-separated methods to compare (case-insensitive), or "
                   "'all' (default with --model: the four baselines graddiff, npo, simnpo, rmu; without: as the config "
                   "says, every method; the config form is methods=[npo,rmu])")
    s.add_argument("--tune", action="store_true", help="run each method at settings chosen for this base model on "
                   "a validation split (as obliviate tune), and score every model on the other items")
    s.set_defaults(fn=cmd_compare)
