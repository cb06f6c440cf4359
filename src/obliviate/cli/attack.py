"""``obliviate attack``: relearning (related corpus, disjoint halves) and linear-probe attacks on a model, on any task."""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import dataclass, field

from obliviate.attacks.harness import TaskAttackConfig, attack_names, run_task_attacks
from obliviate.attacks.positive_controls import (NO_NEGATIVE_CONTROL, UNTAUGHT_HINT, attack_items,
                                                 build_positive_control, no_verdict_line, positive_controls)
from obliviate.attacks.verdict import control_readout, robustness_summary, verdict_line
from obliviate.cli.args import (add_common, add_model_args, add_task_args, check_out_dir, input_paths, load_model_args,
                                previous_digest, seeded, task_digest, task_from_args)
from obliviate.config import build_config, deep_merge
from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import evaluate_task
from obliviate.methods import preset_name
from obliviate.runs.card import untaught_model
from obliviate.runs.report import plot_relearn_curves
from obliviate.runs.results import input_fingerprint, prepare_out_dir, same_run, write_results
from obliviate.attacks.retain_control import NO_CONTROL, RETAIN_FINETUNE, fine_tune_config, retain_finetune_control
from obliviate.train.finetune import training_data
from obliviate.utils import seed_everything

UNTAUGHT = "untaught"
ORACLE = "oracle"
"""``negative_control_kind`` of a control given as ``--oracle DIR``."""


@dataclass
class AttackCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world`` (the world seed is ``--seed``)."""
    attacks: TaskAttackConfig = field(default_factory=TaskAttackConfig)
    control_finetune: dict = field(default_factory=dict)
    """With ``--control retain-finetune`` (the default where the untaught model is known): keys of the retain-only
    fine-tune's config (:class:`~obliviate.train.finetune.FinetuneConfig`) over the settings the fine-tuned model's
    card records (``control_finetune.epochs=20``)."""
    positive_control: bool = True
    """With ``--base`` and a negative control: build the positive control from ``--base`` and attack it, for the
    verdict (:func:`obliviate.attacks.controls.suppression_control`; as ``compare``'s)."""
    positive_control_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.attacks.controls.suppression_control` (``max_steps``, ``lr``)."""
    small_norm_control: bool = True
    """With ``positive_control``, also the small-norm suppression control
    (:func:`obliviate.attacks.controls.small_norm_control`), which calibrates quantization."""
    small_norm_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.attacks.controls.small_norm_control`."""
    eval_batch_size: int = 32
    """Batch size of the evaluations the verdict reads (each model's forget score before the attacks)."""


CONTROLS = (RETAIN_FINETUNE, UNTAUGHT, NO_CONTROL)
"""``--control``: the negative control built (the default, where the untaught model is known), attacked as it is,
or none."""


def negative_control_input(args) -> tuple[str | None, str]:
    """``(the model the negative control is made from, control kind)``. ``--oracle DIR`` is the control itself
    (kind ``oracle``). Otherwise the model before it was taught the task is ``--base-untrained``, else the finetune
    input named by the model cards of ``--base`` or ``--model``; without ``--control`` the negative control is that
    model fine-tuned on the retain data (``retain-finetune``) where it is known, else there is none;
    ``--control retain-finetune`` or ``untaught`` without one fails in one line."""
    if args.oracle:
        if args.control or args.base_untrained:
            raise ConfigError("--oracle is the negative control: give it without --control and --base-untrained")
        return args.oracle, ORACLE
    untrained = args.base_untrained or untaught_model(args.base or args.model)
    kind = args.control or (RETAIN_FINETUNE if untrained else NO_CONTROL)
    if kind == NO_CONTROL:
        if args.base_untrained:
            raise ConfigError(f"--base-untrained is the negative control's model, and --control {NO_CONTROL} attacks "
                              "none: give one of them")
        return None, kind
    if untrained is None:
        what = "fine-tunes" if kind == RETAIN_FINETUNE else "attacks"
        raise ConfigError(f"--control {kind} {what} the model before it was taught the task, and none is known: give "
                          "--base-untrained DIR (no model card of --base or --model names an `obliviate finetune` "
                          "input)")
    return untrained, kind


def no_verdict(args, kind: str) -> str | None:
    """Why this run gives no verdict, as the line that says what to add; None when it gives one."""
    why, add = [], []
    if not args.base:
        why.append("no model before unlearning")
        add.append("--base DIR (the model before unlearning: the verdict reads its attacks and builds the positive "
                   "controls from it)")
    if kind == NO_CONTROL:
        why.append(NO_NEGATIVE_CONTROL)
        add.append(f"--oracle DIR (a model that never saw the forget data), or {UNTAUGHT_HINT}"
                   + (f" and drop --control {NO_CONTROL}" if args.control == NO_CONTROL else ""))
    return no_verdict_line(" and ".join(why), " and ".join(add)) if why else None


def cmd_attack(args) -> None:
    untrained, kind = negative_control_input(args)
    check_out_dir(args.out, input_paths(args, args.base, untrained))
    base = seeded(args.seed, ["seed", "attacks.seed", "attacks.relearn.seed"])
    if args.attacks:  # an unknown name fails here, in one line
        base = deep_merge(base, {"attacks": {"select": attack_names(args.attacks)}})
    cfg = build_config(AttackCommandConfig, args.config, args.overrides, base=base)
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    if kind == RETAIN_FINETUNE:  # bad settings and a task without retain data fail before any load
        fine_tune_config({}, cfg.control_finetune)
        try:
            training_data(task, "retain")
        except DataError:
            if args.control == RETAIN_FINETUNE:
                raise
            print(f"obliviate: task {task.name!r} has no retain data to fine-tune {untrained} on: its negative "
                  "control is that model as it is", file=sys.stderr)
            kind = UNTAUGHT
    if kind != RETAIN_FINETUNE and cfg.control_finetune:
        raise ConfigError(f"config key 'control_finetune' applies to --control {RETAIN_FINETUNE} only")
    missing = no_verdict(args, kind)
    cfg.attacks.relearn.progress = not args.no_progress
    progress = not args.no_progress
    model, tok = load_model_args(args)
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the relearning checkpoints, unless they belong to another run.
    digest, before = task_digest(task), previous_digest(out)
    resume = same_run(out, {"command": "attack", "config": cfg, "task": task.summary(), "data": digest,
                            "model": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                            **({"adapter": input_fingerprint(args.adapter)} if args.adapter else {}),
                            "base": input_fingerprint(args.base), "control": kind,
                            "untrained": input_fingerprint(untrained)})
    if not resume and before is not None and before != digest:
        print(f"obliviate: {out} holds checkpoints of a run on other data (the task's items changed: {before[:12]} "
              f"-> {digest[:12]}); starting afresh", file=sys.stderr)
    elif not resume:
        print(f"obliviate: {out} holds checkpoints of another run (other config or model); starting afresh",
              file=sys.stderr)
    seed_everything(cfg.seed)
    base_model = None
    if args.base:
        base_model, _ = load_model_args(args, path=args.base)
    judge = missing is None  # a verdict: every model is evaluated (its forget score before the attacks) and attacked
    cache: dict = {}  # the base model's scores, computed once for every model attacked

    def attacked(m, name: str, relearn_dir: str) -> dict:
        ev = evaluate_task(m, tok, task, batch_size=cfg.eval_batch_size, progress=progress) if judge else None
        if judge and name != "model":
            print(f"obliviate: attacking {name}", file=sys.stderr)
        att = run_task_attacks(m, tok, task, cfg.attacks, base_model=base_model, metrics=ev,
                               out_dir=out / relearn_dir, resume=resume, base_cache=cache)
        return {**(ev or {}), **att}

    t0 = time.time()
    metrics = attacked(model, "model", "relearn")
    seconds = time.time() - t0  # wall time is not a metric: same seed, same metrics
    del model
    control, control_dir, control_build = None, untrained, None
    if untrained:  # the negative control: the same attacks on the model before it was taught the task
        ctl_args = argparse.Namespace(**{**vars(args), "tokenizer": args.tokenizer or args.model, "adapter": None})
        if kind == RETAIN_FINETUNE:  # ... fine-tuned on the retain data only
            print(f"obliviate: negative control: {untrained} fine-tuned on the retain data only (cached in "
                  f"{out / 'control'})" + ("" if args.control else f"; the default: --control {UNTAUGHT} attacks "
                                           f"{untrained} as it is, --control {NO_CONTROL} none"), file=sys.stderr)
            control_dir, control_build = retain_finetune_control(
                untrained, args.base or args.model, task, out / "control",
                lambda p: load_model_args(ctl_args, path=p), preset=preset_name, overrides=cfg.control_finetune,
                seed=cfg.seed, progress=progress)
        else:  # ... or as it is
            print(f"obliviate: negative control: {untrained} (" + ("--oracle" if kind == ORACLE else
                  "the model before it was taught the task") + ")", file=sys.stderr)
        ctl_model, _ = load_model_args(ctl_args, path=control_dir)
        control = attacked(ctl_model, "the negative control", "relearn_control")
        del ctl_model
    else:
        print("obliviate: no negative control (--oracle, --base-untrained, or a model card naming the finetune "
              "input): the probe and MIA figures are uncalibrated", file=sys.stderr)
    references, built, verdict = {}, {}, None
    if judge:  # the base model and the positive controls built from it, attacked as compare attacks them
        references["base"] = attacked(base_model, "the base model", "relearn_base")
        for cname, (build, kwargs) in positive_controls(cfg).items():
            print(f"obliviate: positive control: {cname} built from {args.base}", file=sys.stderr)
            ctl, built[cname] = build_positive_control(build, base_model, tok, task, seed=cfg.seed, kwargs=kwargs)
            if ctl is not None:
                references[cname] = attacked(ctl, cname, f"relearn_{cname}")
                del ctl
        summary = robustness_summary(copy.deepcopy({**references, "oracle": control, "model": metrics}),
                                     items=attack_items(task, cfg.attacks))
        verdict = {**summary["verdicts"]["model"], "calibration": summary["calibration"]}
        verdict["line"] = verdict_line("verdict", verdict)
    del base_model
    metrics.update(control_readout(metrics, control))
    plot_relearn_curves(metrics, out / "relearn_curve.png")
    write_results(out, seed=cfg.seed, config=cfg, metrics={**metrics, "negative_control": control},
                  model_dir=str(args.model), base_model_dir=args.base, negative_control_dir=control_dir,
                  negative_control_kind=None if control is None else kind,
                  untaught_model_dir=None if kind == ORACLE else untrained,
                  **({"negative_control_build": control_build} if control_build else {}),
                  verdict=verdict, **({"no_verdict": missing} if missing else {}),
                  **({"reference_metrics": references, "positive_controls": built} if judge else {}),
                  task=task.summary(), timings={"attack_seconds": seconds})
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
                      if not k.endswith(("_curve", "_per_layer"))}, indent=1))
    for name, key in (("probe", "probe_acc"), ("MIA (Min-K%)", "mia_auc_min_k")):
        if key in metrics:
            ctl = metrics.get(f"{key[:-4]}_control_acc" if key == "probe_acc" else f"{key}_control")
            state = "calibrated" if metrics[f"{key.split('_')[0]}_calibrated"] else "uncalibrated"
            print(f"obliviate: {name} {metrics[key]:.3f}, negative control "
                  f"{'n/a' if ctl is None else f'{ctl:.3f}'}: {state}", file=sys.stderr)
    print(missing or verdict["line"], file=sys.stderr)  # the last line: the verdict, or what gives one


def register(sub) -> None:
    s = sub.add_parser("attack", help="relearning (related corpus, disjoint halves) and probe attacks on a "
                       "model's forget knowledge")
    add_common(s)
    add_model_args(s, help="the model to attack (e.g. an unlearned one): a directory or hub id")
    s.add_argument("--base", help="the model before unlearning: its forget score is the target of steps_to_base, "
                   "and with a negative control the positive controls are built from it for the verdict (without "
                   "it, steps_to_base is null and there is no verdict)")
    s.add_argument("--base-untrained", help="the model before it was taught the task, from which the negative "
                   "control is made (default: the finetune input named by the model cards of --base or --model); "
                   "without one there is no verdict and the probe and MIA figures are labelled uncalibrated")
    s.add_argument("--oracle", help="a model that never saw the forget data, attacked as it is as the negative "
                   "control (instead of one made from the model before it was taught the task)")
    s.add_argument("--control", choices=CONTROLS, help=f"the negative control: {RETAIN_FINETUNE} (the default "
                   "wherever the model before it was taught the task is known) fine-tunes that model on the task's "
                   "retain data only, with the settings the fine-tuned model's card records, cached under "
                   f"--out/control; {UNTAUGHT} attacks it as it is; {NO_CONTROL} attacks none (no verdict)")
    add_task_args(s)
    s.add_argument("--attacks", metavar="NAMES", help="comma-separated attacks to run, or 'all' (default: relearn, "
                   f"relearn_disjoint, mia, probe, format_shift); names: {', '.join(attack_names('all'))}")
    s.set_defaults(fn=cmd_attack)
