"""Unlearning commands: methods, unlearn, compare."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from obliviate.cli.main import add_common, seeded
from obliviate.cli.args import (add_eval_args, add_model_args, add_task_args, check_out_dir, eval_overrides,
                                       load_model_args, task_from_args, task_spec, warn)
from obliviate.config import build_config, to_dict
from obliviate.errors import ConfigError
from obliviate.eval.suite import evaluate_task, knows_forget_set, score_against
from obliviate.runs.card import write_model_card
from obliviate.recipes.task_compare import TaskCompareConfig, run_task_compare
from obliviate.runs.results import input_fingerprint, prepare_out_dir, same_run, write_results
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.methods.engine import check_unlearn_config, unlearn
from obliviate.utils import seed_everything
from obliviate.methods import METHODS, method_defaults, method_names, preset_name
from obliviate.methods.engine import UnlearnConfig


@dataclass
class EvalOptions:
    batch_size: int = 32
    max_new_tokens: int | None = None
    """Greedy tokens per QA answer (default: the longest reference answer plus 4)."""

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"config key 'eval.batch_size': must be >= 1, got {self.batch_size}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"config key 'eval.max_new_tokens': must be >= 1, got {self.max_new_tokens}")


@dataclass
class UnlearnCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config (``world.n_forget=20``) for ``--task world``; the world seed is ``--seed``."""
    unlearn: UnlearnConfig = field(default_factory=UnlearnConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)


def preset_text(preset: dict, kind: str = "train") -> str:
    """``lr=0.001 steps=50 coef=20.0`` (edit methods: only their params)."""
    items = [] if kind == "edit" else [f"lr={preset['lr']:g}", f"steps={preset['steps']}"]
    items += [f"{k}={v}" for k, v in preset["params"].items()]
    return " ".join(items) or "-"


def cmd_methods(args) -> None:
    names = method_names()
    if not getattr(args, "verbose", False):
        for name in names:
            print(name)
        return
    rows = [(n, METHODS[n].kind, METHODS[n].paper or "-", preset_text(METHODS[n].presets["tiny"], METHODS[n].kind))
            for n in names]
    w = max(len(n) for n in names)
    for name, kind, paper, tiny in rows:
        print(f"{name:<{w}}  {kind:<5}  tiny: {tiny}  | {paper}")


def resolve_method(name: str) -> str:
    """A registered method name, case-insensitively (``NPO`` -> ``npo``); a one-line error with the closest."""
    import difflib

    names = method_names()
    key = name.strip().lower().replace("-", "_")
    if key in names:
        return key
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown method {name!r}{hint}; known methods: {', '.join(names)}")


def unlearn_command_config(args, method: str, preset: str) -> UnlearnCommandConfig:
    """Dataclass defaults, then the method's preset, then ``--config``, then the overrides (each key once)."""
    base = seeded(args.seed, ["seed", "unlearn.seed"])
    base["eval"] = eval_overrides(args)
    d = method_defaults(method, preset)
    base["unlearn"].update(method=method, params=d["params"])
    if METHODS[method].kind != "edit":
        base["unlearn"]["train"] = {"steps": d["steps"], "lr": d["lr"]}
    return build_config(UnlearnCommandConfig, args.config, args.overrides, base=base)


def eval_kwargs(cfg, progress: bool) -> dict:
    return {"batch_size": cfg.eval.batch_size, "max_new_tokens": cfg.eval.max_new_tokens, "progress": progress}


def cmd_unlearn(args) -> None:
    check_out_dir(args.out, [args.model, args.tokenizer])
    method = resolve_method(args.method)
    cfg = unlearn_command_config(args, method, "tiny")  # every key checked before the model is loaded
    check_unlearn_config(cfg.unlearn)
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    model, tok = load_model_args(args)
    preset = preset_name(model)
    if preset != "tiny":
        cfg = unlearn_command_config(args, method, preset)
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the training checkpoints, unless they belong to another run.
    resume = same_run(out, {"command": "unlearn", "config": cfg, "task": task.summary(),
                            "base": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                            "pad_policy": args.pad_policy})
    if not resume:
        print(f"obliviate: {out} holds checkpoints of another run (other config or model); starting afresh",
              file=sys.stderr)
    progress = not args.no_progress
    seed_everything(cfg.seed)
    before = evaluate_task(model, tok, task, **eval_kwargs(cfg, progress))
    if knows_forget_set(before) is False:
        warn(f"the base model does not know the forget set: forget score {before['forget_score']:.3f} "
             f"(chance {before.get('forget_chance', 0.0):.3f}); unlearning it shows nothing. Teach it first "
             "(obliviate finetune) or check the prompt format (--template, --chat-template)")
    model, summary = unlearn(model, tok, task.forget, task.retain, cfg.unlearn, out / "train", prompt=task.prompt,
                             idk=task.idk, progress=progress, resume=resume)
    after = evaluate_task(model, tok, task, **eval_kwargs(cfg, progress))
    after.update(score_against(before, after))
    save_trained(model, out / "model", tok)  # rank 0 writes, in one process or several
    if not is_main_process():
        return
    write_model_card(out / "model", base_model=args.model, task=task.name, method=method,
                     settings=to_dict(cfg.unlearn), metrics=after)
    write_results(out, seed=cfg.seed, config=cfg, metrics={"base": before, method: after},
                  model_dir=str(out / "model"), base_model_dir=str(args.model), task=task.summary(), preset=preset,
                  data=summary["data"], **({"edit": summary["edit"]} if "edit" in summary else {}))
    print(f"{method} on {task.name}: " + ", ".join(
        f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in ("forget_score", "retain_score", "utility_score")
        if isinstance(before.get(k), float)) + (f", S-unlearning {after['s_unlearning']:.3f}"
                                                 if "s_unlearning" in after else ""))
    print(f"model: {out / 'model'}")


def run_compare_command(args, default_methods=None) -> dict:
    from obliviate.recipes.compare.run import CompareConfig, run_compare
    from obliviate.config import build_config
    from obliviate.runs.results import prepare_out_dir, write_results

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
    s = sub.add_parser("methods", help="list the registered unlearning methods, one per line")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="one line each: name, kind (train | edit), tiny preset (lr, steps, params) and paper")
    s.set_defaults(fn=cmd_methods)
    s = sub.add_parser("unlearn", help="unlearn a task's forget data from a model, evaluate before and after")
    add_common(s)
    add_model_args(s, aliases=("--base",), help="the model to unlearn from: a directory or hub id (--base: "
                   "the former spelling)")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`; case-insensitive)")
    add_task_args(s)
    add_eval_args(s)
    s.set_defaults(fn=cmd_unlearn)
    s = sub.add_parser("compare", help="several methods on one base model: table, plots, Markdown and HTML report "
                       "(the world demo, or any --task / --model)")
    add_common(s)
    add_model_args(s, required=False, help="base model (default: the world demo's own, or for another task a tiny "
                   "model fine-tuned on it)")
    s.add_argument("--oracle", help="with --model: a model that never saw the forget data (the negative control)")
    add_task_args(s)
    s.set_defaults(fn=cmd_compare)
