"""``obliviate compare``: several methods on one base model, with a table, plots and a report (the world demo,
or any ``--task`` / ``--model``)."""

from __future__ import annotations

from obliviate.cli.args import (add_common, add_model_args, add_task_args, check_out_dir, load_model_args, seeded,
                                task_from_args, task_spec)
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.recipes.compare.run import CompareConfig, run_compare
from obliviate.recipes.task_compare import TaskCompareConfig, run_task_compare
from obliviate.runs.results import prepare_out_dir, write_results


def run_compare_command(args, default_methods=None) -> dict:
    base = seeded(args.seed, ["seed", "pretrain.seed", "pretrain.world.seed", "attacks.seed"])
    if default_methods is not None:
        base["methods"] = default_methods
    cfg = build_config(CompareConfig, args.config, args.overrides, base=base)
    out = prepare_out_dir(args.out)
    res = run_compare(cfg, out, progress=not args.no_progress)
    write_results(out, seed=cfg.seed, config=cfg, metrics=res["metrics"], method_settings=res["configs"],
                  timings=res["timings"], model_dirs=res["model_dirs"], robustness=res["robustness"])
    print_table(res["metrics"], ["forget_qa_acc", "retain_qa_acc", "s_unlearning", "relearn_forget_qa_acc"])
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")
    return res


def print_table(metrics: dict, cols: list[str]) -> None:
    """One line per model: its name and the values of ``cols`` ("-" where missing)."""
    w = max([len(n) for n in metrics] + [5]) + 2
    print(f"{'model':{w}s} " + " ".join(f"{c:>22s}" for c in cols))
    for name, m in metrics.items():
        vals = [m.get(c) for c in cols]
        print(f"{name:{w}s} " + " ".join(f"{v:22.3f}" if isinstance(v, float) else f"{'-':>22s}" for v in vals))


def cmd_compare(args) -> None:
    """The world demo comparison, or (``--task`` other than world, ``--forget`` files, or ``--model``) the
    comparison on any task (:mod:`obliviate.recipes.task_compare`)."""
    if task_spec(args) == "world" and not args.model:
        for flag in ("oracle", "limit"):
            if getattr(args, flag, None):
                raise ConfigError(f"--{flag} needs --task or --model (the world demo trains its own oracle)")
        run_compare_command(args)
        return
    check_out_dir(args.out, [args.model, args.oracle, args.tokenizer])
    cfg = build_config(TaskCompareConfig, args.config, args.overrides, base=seeded(args.seed, ["seed",
                                                                                           "attacks.seed"]))
    task = task_from_args(args, seed=cfg.seed)
    cfg.attacks.relearn.progress = not args.no_progress
    out = prepare_out_dir(args.out)
    res = run_task_compare(task, cfg, out, model_dir=args.model, oracle_dir=args.oracle,
                           load=lambda p: load_model_args(args, path=p), progress=not args.no_progress)
    write_results(out, seed=cfg.seed, config=cfg, metrics=res["metrics"], method_settings=res["configs"],
                  timings=res["timings"], task=task.summary(), model_dirs=res["models"], robustness=res["robustness"])
    print_table(res["metrics"], ["forget_score", "retain_score", "s_unlearning", "relearn_disjoint_acc"])
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")


def register(sub) -> None:
    s = sub.add_parser("compare", help="several methods on one base model: table, plots, Markdown and HTML report "
                       "(the world demo, or any --task / --model)")
    add_common(s)
    add_model_args(s, required=False, help="base model (default: the world demo's own, or for another task a tiny "
                   "model fine-tuned on it)")
    s.add_argument("--oracle", help="with --model: a model that never saw the forget data (the negative control)")
    add_task_args(s)
    s.set_defaults(fn=cmd_compare)
