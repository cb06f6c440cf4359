"""``obliviate unlearn``: unlearn a task's forget data from a model, evaluate before and after."""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.cli.args import (EvalOptions, add_common, add_eval_args, add_model_args, add_task_args, check_out_dir,
                                eval_kwargs, eval_overrides, input_paths, load_model_args, mapping_from_args, seeded,
                                task_files, task_from_args, tokenizer_args, warn)
from obliviate.config import build_config, to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.eval.outcome import unlearn_outcome
from obliviate.eval.suite import evaluate_task, knows_forget_set, score_against
from obliviate.methods import METHODS, method_defaults, method_names, preset_name
from obliviate.unlearning.engine import (UnlearnConfig, check_overlap, check_unlearn_config, check_unlearn_data,
                                      check_unlearn_run, unlearn)
from obliviate.pipelines import sequential
from obliviate.pipelines.tune.run import TuneConfig, trial_config, tune, validation_split, write_preset
from obliviate.runs.card import read_model_card, write_model_card
from obliviate.runs.results import input_fingerprint, prepare_out_dir, same_run, write_results
from obliviate.tasks.files import FieldsUnknown
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.train.finetune import PRESETS as FINETUNE_PRESETS, training_data
from obliviate.utils import seed_everything


@dataclass
class UnlearnCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config (``world.n_forget=20``) for ``--task world``; the world seed is ``--seed``."""
    unlearn: UnlearnConfig = field(default_factory=UnlearnConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)
    tune: TuneConfig = field(default_factory=TuneConfig)
    """``obliviate tune`` and ``unlearn --tune``: the grid, the budget, the constraint and the validation split."""


def resolve_method(name: str) -> str:
    """A registered method name, case-insensitively (``NPO`` -> ``npo``); a one-line error with the closest."""
    names = method_names()
    key = name.strip().lower().replace("-", "_")
    if key in names:
        return key
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown method {name!r}{hint}; known methods: {', '.join(names)}")


def finetune_lr_factor(model_dir) -> tuple[float, str | None]:
    """(factor, why): the fine-tuning run's learning rate over its size preset's, when ``model_dir`` was taught by
    ``obliviate finetune`` (its model card's settings say ``lr`` and ``preset``); else ``(1.0, None)``.

    A method's preset lr is a fixed fraction of the fine-tuning preset's (tiny: 3e-3, e.g. NPO's 3e-4 a tenth of
    it; paper: 1e-5): the step size at which this model learned the facts. A model taught at another lr gets the
    method's lr times this factor, so the fraction holds; at the preset's own lr the factor is 1 and nothing moves."""
    meta = read_model_card(model_dir) if model_dir and Path(model_dir).is_dir() else {}
    if not isinstance(meta.get("obliviate"), dict) or meta["obliviate"].get("method") != "finetune":
        return 1.0, None
    try:
        text = (Path(model_dir) / "README.md").read_text()
        settings = json.loads(text.split("## Settings", 1)[1].split("```json", 1)[1].split("```", 1)[0])
    except (OSError, IndexError, ValueError):
        return 1.0, None
    lr, preset = settings.get("lr"), settings.get("preset")
    if preset not in FINETUNE_PRESETS or isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        return 1.0, None
    factor = float(lr) / FINETUNE_PRESETS[preset]["lr"]
    if abs(factor - 1.0) < 1e-9:
        return 1.0, None
    return factor, (f"the method's preset lr scaled by {factor:.3g}: the model was fine-tuned at lr {lr:g}, "
                    f"the {preset} fine-tuning preset's is {FINETUNE_PRESETS[preset]['lr']:g}")


def unlearn_command_config(args, method: str, preset: str, lr_factor: float = 1.0) -> UnlearnCommandConfig:
    """Dataclass defaults, then the method's preset (its lr times ``lr_factor``, :func:`finetune_lr_factor`), then
    ``--config``, then the overrides (each key once)."""
    base = seeded(args.seed, ["seed", "unlearn.seed"])
    base["eval"] = eval_overrides(args)
    d = method_defaults(method, preset)
    base["unlearn"].update(method=method, params=d["params"])
    if METHODS[method].kind != "edit":
        base["unlearn"]["train"] = {"steps": d["steps"], "lr": d["lr"] * lr_factor}
    cfg = build_config(UnlearnCommandConfig, args.config, args.overrides, base=base)
    if cfg.unlearn.method != method:  # --config or unlearn.method=... named another method
        if resolve_method(cfg.unlearn.method) != method:
            raise ConfigError(f"config key 'unlearn.method' ({cfg.unlearn.method!r}) contradicts --method "
                              f"{args.method}: the method is named by --method alone (drop unlearn.method)")
        cfg.unlearn.method = method
    return cfg


def checked_run(args, tuning: bool = False):
    """(method, cfg, task, model, tokenizer, preset, split): every check of ``unlearn`` (and ``tune``) in order,
    the config, the task, the data with the tokenizer alone, then the model; ``split`` is the validation split
    (:func:`~obliviate.pipelines.tune.run.validation_split`) when ``tuning``, made before the model is loaded."""
    check_out_dir(args.out, input_paths(args))
    method = resolve_method(args.method)
    factor, why = finetune_lr_factor(args.model)
    cfg = unlearn_command_config(args, method, "tiny", factor)  # every key checked before the model is loaded
    check_unlearn_config(cfg.unlearn)
    if tuning and METHODS[method].kind == "edit":
        raise ConfigError(f"tune: {method!r} is an edit method: it has no learning rate or steps to tune")
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    if task.meta.get("retain_heldout"):  # a forget pair among the held-out retain pairs is an overlap too (issue #42)
        check_overlap(task.forget, training_data(task, "retain"), cfg.unlearn.allow_overlap)
    split = validation_split(task, cfg.tune.val_fraction, cfg.tune.split_seed) if tuning else None
    if METHODS[method].kind == "edit":
        check_overlap(task.forget, task.retain, cfg.unlearn.allow_overlap)
    else:  # the data and the lengths, with the tokenizer alone: before the model is loaded
        tok = tokenizer_args(args)
        check_unlearn_data(tok, task.forget, task.retain, cfg.unlearn, prompt=task.prompt)
    model, tok = load_model_args(args)
    preset = preset_name(model)
    if preset != "tiny":
        cfg = unlearn_command_config(args, method, preset, factor)
    if why and METHODS[method].kind != "edit":
        print(f"obliviate: {why}", file=sys.stderr)
    check_unlearn_run(model, tok, task.forget, task.retain, cfg.unlearn, prompt=task.prompt)  # before --out
    return method, cfg, task, model, tok, preset, split


def run_tuning(args, cfg, model, tok, split, out, progress: bool) -> dict:
    """The grid on the validation task (:func:`~obliviate.pipelines.tune.run.tune`, parts in ``out/tune``), the chosen
    settings written to ``out/preset.yaml``; says the choice in one line."""
    result = tune(model, tok, split[0], cfg.unlearn, cfg.tune, out / "tune", progress=progress,
                  eval_kw={k: v for k, v in eval_kwargs(cfg, False).items() if k != "progress"},
                  fingerprint={"base": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                               "task": split[0].summary(), "seed": cfg.seed},
                  log=(lambda line: None) if args.no_progress else (lambda line: print(line, file=sys.stderr)))
    write_preset(out / "preset.yaml", result)
    s, c = result["settings"]["unlearn"], result["chosen"]
    print(f"tune {cfg.unlearn.method}: chose lr {s['train']['lr']:.3g}, steps {s['train']['steps']}"
          + (f", {c['param']} {c['value']:.3g}" if c["param"] else "")
          + f" (trial {c['index'] + 1} of {len(result['trials'])}; validation: forget removed "
          f"{c['forgot'] or 0.0:.3f}, keep share {c['retained'] if c['retained'] is not None else float('nan'):.3f}"
          + ("" if result["feasible"] else f"; no trial kept {cfg.tune.retain_share:.2f} of the base") + f"); "
          f"preset: {out / 'preset.yaml'}, report: {out / 'tune' / 'report.md'}")
    return result


def cmd_unlearn(args) -> None:
    if args.requests:  # sequential unlearning: obliviate.pipelines.sequential
        return cmd_requests(args)
    method, cfg, task, model, tok, preset, split = checked_run(args, tuning=args.tune)
    out = prepare_out_dir(args.out)
    tuned = None
    if args.tune:  # settings chosen on the validation items; trained on all the data, reported on the others
        tuned = run_tuning(args, cfg, model, tok, split, out, not args.no_progress)
        cfg.unlearn = trial_config(cfg.unlearn, tuned["chosen"])
        task = split[1]
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
    outcome = unlearn_outcome(before, after, method=method)
    save_trained(model, out / "model", tok)  # rank 0 writes, in one process or several
    if not is_main_process():
        return
    write_model_card(out / "model", base_model=args.model, task=task.name, method=method,
                     settings=to_dict(cfg.unlearn), metrics=after, outcome=outcome)
    write_results(out, seed=cfg.seed, config=cfg, metrics={"base": before, method: after},
                  model_dir=str(out / "model"), base_model_dir=str(args.model), task=task.summary(), preset=preset,
                  data=summary["data"], reference=summary.get("reference", "none"), unlearn_outcome=outcome,
                  **({"tune": {k: tuned[k] for k in ("chosen", "feasible", "settings", "trials", "retain_share")},
                      "reported_on": "the items left out of the validation split"} if tuned else {}),
                  **({"edit": summary["edit"]} if "edit" in summary else {}))
    print(f"{method} on {task.name}: " + ", ".join(
        f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in ("forget_score", "retain_score", "utility_score")
        if isinstance(before.get(k), float)) + (f", S-unlearning {after['s_unlearning']:.3f}"
                                                 if "s_unlearning" in after else ""))
    print(f"model: {out / 'model'}")
    print(outcome["line"])


# ------------------------------------------------------------ --requests: sequential unlearning (issue #31, item 5)

def cmd_requests(args) -> None:
    """``unlearn --requests A,B,...``: the requests in order on the same model, every metric after each
    (:mod:`obliviate.pipelines.sequential`); every check before the model is loaded."""
    if args.tune:
        raise ConfigError("--tune and --requests: tune on one forget set (without --requests), then pass the chosen "
                          "settings (--config OUT/preset.yaml) to the sequential run")
    paths = sequential.request_paths(args.requests, args.forget)
    check_out_dir(args.out, input_paths(args, *map(str, paths)))
    if not args.task:  # the files shorthand: the forget data are the requests
        args.forget = [str(p) for p in paths]
    mapping = mapping_from_args(args.mapping, {**task_files(args), "forget": [str(p) for p in paths]})
    try:
        requests = sequential.read_requests(paths, mapping=mapping, template=args.template, chat=args.chat_template,
                                            limit=args.limit)
    except FieldsUnknown as e:  # the hint in the command line's syntax
        raise DataError(f"--requests: {e.hint(cli=True)}") from None
    method, cfg, task, model, tok, preset, _ = checked_run(args)
    out = prepare_out_dir(args.out)
    fingerprint = {"command": "unlearn --requests", "config": to_dict(cfg), "task": task.summary(),
                   "base": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                   "adapter": input_fingerprint(args.adapter), "pad_policy": args.pad_policy}
    res = sequential.run_requests(model, tok, task, requests, cfg.unlearn, out, fingerprint=fingerprint,
                                  seed=cfg.seed, eval_kw=eval_kwargs(cfg, not args.no_progress),
                                  progress=not args.no_progress)
    for line in sequential.finish(out, res, requests, task, method, cfg, tok, base_model=str(args.model),
                                  preset=preset):
        print(line)


def register(sub) -> None:
    s = sub.add_parser("unlearn", help="unlearn a task's forget data from a model, evaluate before and after")
    add_common(s)
    add_model_args(s, aliases=("--base",), help="the model to unlearn from: a directory or hub id (--base: "
                   "the former spelling)")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`; case-insensitive)")
    add_task_args(s)
    add_eval_args(s)
    s.add_argument("--tune", action="store_true", help="first choose lr, steps and the method's own weight on a "
                   "validation split of the forget and retain pairs (as obliviate tune), then report on the rest")
    s.add_argument("--requests", metavar="A.jsonl,B.jsonl,...", help="sequential unlearning: apply these forget "
                   "files one after another to the same model (the retain data stay the task's), evaluate every "
                   "metric and the cheap attacks after each; the curve goes to report.md and results.json, and a "
                   "rerun resumes after the last finished request (docs/tasks.md, \"Sequential unlearning\")")
    s.set_defaults(fn=cmd_unlearn)
