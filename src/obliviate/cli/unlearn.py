"""``obliviate unlearn``: unlearn a task's forget data from a model, evaluate before and after."""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field

from obliviate.cli.args import (EvalOptions, add_common, add_eval_args, add_model_args, add_task_args, check_out_dir,
                                eval_kwargs, eval_overrides, input_paths, load_model_args, seeded, task_from_args, warn)
from obliviate.config import build_config, to_dict
from obliviate.errors import ConfigError
from obliviate.eval.outcome import unlearn_verdict
from obliviate.eval.suite import evaluate_task, knows_forget_set, score_against
from obliviate.methods import METHODS, method_defaults, method_names, preset_name
from obliviate.methods.engine import (UnlearnConfig, check_overlap, check_unlearn_config, check_unlearn_data,
                                      check_unlearn_run, unlearn)
from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
from obliviate.runs.card import write_model_card
from obliviate.runs.results import input_fingerprint, prepare_out_dir, same_run, write_results
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.utils import seed_everything


@dataclass
class UnlearnCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config (``world.n_forget=20``) for ``--task world``; the world seed is ``--seed``."""
    unlearn: UnlearnConfig = field(default_factory=UnlearnConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)


def resolve_method(name: str) -> str:
    """A registered method name, case-insensitively (``NPO`` -> ``npo``); a one-line error with the closest."""
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
    cfg = build_config(UnlearnCommandConfig, args.config, args.overrides, base=base)
    if cfg.unlearn.method != method:  # --config or unlearn.method=... named another method
        if resolve_method(cfg.unlearn.method) != method:
            raise ConfigError(f"config key 'unlearn.method' ({cfg.unlearn.method!r}) contradicts --method "
                              f"{args.method}: the method is named by --method alone (drop unlearn.method)")
        cfg.unlearn.method = method
    return cfg


def cmd_unlearn(args) -> None:
    check_out_dir(args.out, input_paths(args))
    method = resolve_method(args.method)
    cfg = unlearn_command_config(args, method, "tiny")  # every key checked before the model is loaded
    check_unlearn_config(cfg.unlearn)
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    if METHODS[method].kind == "edit":
        check_overlap(task.forget, task.retain, cfg.unlearn.allow_overlap)
    else:  # the data and the lengths, with the tokenizer alone: before the model is loaded
        tok = ensure_pad_token(load_tokenizer(args.tokenizer or args.model), policy=args.pad_policy)
        check_unlearn_data(tok, task.forget, task.retain, cfg.unlearn, prompt=task.prompt)
    model, tok = load_model_args(args)
    preset = preset_name(model)
    if preset != "tiny":
        cfg = unlearn_command_config(args, method, preset)
    check_unlearn_run(model, tok, task.forget, task.retain, cfg.unlearn, prompt=task.prompt)  # before --out
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the training checkpoints, unless they belong to another run.
    resume = same_run(out, {"command": "unlearn", "config": cfg, "task": task.summary(),
                            "base": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                            **({"adapter": input_fingerprint(args.adapter)} if args.adapter else {}),
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
    verdict = unlearn_verdict(before, after, method=method)
    save_trained(model, out / "model", tok)  # rank 0 writes, in one process or several
    if not is_main_process():
        return
    write_model_card(out / "model", base_model=args.model, task=task.name, method=method,
                     settings=to_dict(cfg.unlearn), metrics=after, verdict=verdict)
    write_results(out, seed=cfg.seed, config=cfg, metrics={"base": before, method: after},
                  model_dir=str(out / "model"), base_model_dir=str(args.model), task=task.summary(), preset=preset,
                  data=summary["data"], unlearn_verdict=verdict, **({"edit": summary["edit"]} if "edit" in summary else {}))
    print(f"{method} on {task.name}: " + ", ".join(
        f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in ("forget_score", "retain_score", "utility_score")
        if isinstance(before.get(k), float)) + (f", S-unlearning {after['s_unlearning']:.3f}"
                                                 if "s_unlearning" in after else ""))
    print(f"model: {out / 'model'}")
    print(verdict["line"])


def register(sub) -> None:
    s = sub.add_parser("unlearn", help="unlearn a task's forget data from a model, evaluate before and after")
    add_common(s)
    add_model_args(s, aliases=("--base",), help="the model to unlearn from: a directory or hub id (--base: "
                   "the former spelling)")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`; case-insensitive)")
    add_task_args(s)
    add_eval_args(s)
    s.set_defaults(fn=cmd_unlearn)
