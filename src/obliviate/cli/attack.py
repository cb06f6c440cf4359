"""``obliviate attack``: relearning (related corpus, disjoint halves) and linear-probe attacks on a model, on any task."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field

from obliviate.attacks.verdict import control_readout
from obliviate.attacks.harness import ATTACKS, TaskAttackConfig, attack_names, run_task_attacks
from obliviate.cli.args import (add_common, add_model_args, add_task_args, check_out_dir, input_paths, load_model_args,
                                previous_digest, seeded, task_digest, task_from_args)
from obliviate.config import build_config, deep_merge
from obliviate.errors import ConfigError
from obliviate.methods import preset_name
from obliviate.runs.card import untaught_model
from obliviate.runs.report import plot_relearn_curves
from obliviate.runs.results import input_fingerprint, prepare_out_dir, same_run, write_results
from obliviate.attacks.retain_control import RETAIN_FINETUNE, fine_tune_config, retain_finetune_control
from obliviate.train.finetune import training_data
from obliviate.utils import seed_everything


@dataclass
class AttackCommandConfig:
    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world`` (the world seed is ``--seed``)."""
    attacks: TaskAttackConfig = field(default_factory=TaskAttackConfig)
    control_finetune: dict = field(default_factory=dict)
    """With ``--control retain-finetune``: keys of the retain-only fine-tune's config
    (:class:`~obliviate.train.finetune.FinetuneConfig`) over the settings the fine-tuned model's card records
    (``control_finetune.epochs=20``)."""


def negative_control_input(args) -> str | None:
    """The model before it was taught the task: ``--base-untrained``, else the finetune input named by the model
    cards of ``--base`` or ``--model``; with ``--control retain-finetune`` it is required (one line without)."""
    untrained = args.base_untrained or untaught_model(args.base or args.model)
    if untrained is None and args.control == RETAIN_FINETUNE:
        raise ConfigError(f"--control {RETAIN_FINETUNE} fine-tunes the model before it was taught the task on the "
                          "retain data, and none is known: give --base-untrained DIR (no model card of --base or "
                          "--model names an `obliviate finetune` input)")
    return untrained


def cmd_attack(args) -> None:
    untrained = negative_control_input(args)
    check_out_dir(args.out, input_paths(args, args.base, untrained))
    base = seeded(args.seed, ["seed", "attacks.seed", "attacks.relearn.seed"])
    if args.attacks:  # an unknown name fails here, in one line
        base = deep_merge(base, {"attacks": {"select": attack_names(args.attacks)}})
    cfg = build_config(AttackCommandConfig, args.config, args.overrides, base=base)
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    if args.control == RETAIN_FINETUNE:  # bad settings and a task without retain data fail before any load
        fine_tune_config({}, cfg.control_finetune)
        training_data(task, "retain")
    elif cfg.control_finetune:
        raise ConfigError(f"config key 'control_finetune' applies to --control {RETAIN_FINETUNE} only")
    cfg.attacks.relearn.progress = not args.no_progress
    model, tok = load_model_args(args)
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the relearning checkpoints, unless they belong to another run.
    digest, before = task_digest(task), previous_digest(out)
    resume = same_run(out, {"command": "attack", "config": cfg, "task": task.summary(), "data": digest,
                            "model": input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
                            **({"adapter": input_fingerprint(args.adapter)} if args.adapter else {}),
                            "base": input_fingerprint(args.base), "control": args.control,
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
    t0 = time.time()
    metrics = run_task_attacks(model, tok, task, cfg.attacks, base_model=base_model, out_dir=out / "relearn",
                               resume=resume)
    seconds = time.time() - t0  # wall time is not a metric: same seed, same metrics
    del base_model
    control, control_dir, control_build = None, untrained, None
    if untrained:  # the negative control: the same attacks on the model before it was taught the task
        ctl_args = argparse.Namespace(**{**vars(args), "tokenizer": args.tokenizer or args.model, "adapter": None})
        if args.control == RETAIN_FINETUNE:  # ... or on that model fine-tuned on the retain data only
            print(f"obliviate: negative control: {untrained} fine-tuned on the retain data only (cached in "
                  f"{out / 'control'})", file=sys.stderr)
            control_dir, control_build = retain_finetune_control(
                untrained, args.base or args.model, task, out / "control",
                lambda p: load_model_args(ctl_args, path=p), preset=preset_name, overrides=cfg.control_finetune,
                seed=cfg.seed, progress=not args.no_progress)
        else:
            print(f"obliviate: negative control: {untrained} (the model before it was taught the task)",
                  file=sys.stderr)
        ctl_model, _ = load_model_args(ctl_args, path=control_dir)
        control = run_task_attacks(ctl_model, tok, task, cfg.attacks, out_dir=out / "relearn_control", resume=resume)
        del ctl_model
    else:
        print("obliviate: no negative control (--base-untrained, or a model card naming the finetune input): the "
              "probe and MIA figures are uncalibrated", file=sys.stderr)
    metrics.update(control_readout(metrics, control))
    plot_relearn_curves(metrics, out / "relearn_curve.png")
    write_results(out, seed=cfg.seed, config=cfg, metrics={**metrics, "negative_control": control},
                  model_dir=str(args.model), base_model_dir=args.base, negative_control_dir=control_dir,
                  negative_control_kind=None if control is None else args.control, untaught_model_dir=untrained,
                  **({"negative_control_build": control_build} if control_build else {}),
                  task=task.summary(), timings={"attack_seconds": seconds})
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
                      if not k.endswith(("_curve", "_per_layer"))}, indent=1))
    for name, key in (("probe", "probe_acc"), ("MIA (Min-K%)", "mia_auc_min_k")):
        if key in metrics:
            ctl = metrics.get(f"{key[:-4]}_control_acc" if key == "probe_acc" else f"{key}_control")
            state = "calibrated" if metrics[f"{key.split('_')[0]}_calibrated"] else "uncalibrated"
            print(f"obliviate: {name} {metrics[key]:.3f}, negative control "
                  f"{'n/a' if ctl is None else f'{ctl:.3f}'}: {state}", file=sys.stderr)


def register(sub) -> None:
    s = sub.add_parser("attack", help="relearning (related corpus, disjoint halves) and probe attacks on a "
                       "model's forget knowledge")
    add_common(s)
    add_model_args(s, help="the model to attack (e.g. an unlearned one): a directory or hub id")
    s.add_argument("--base", help="the model before unlearning: its forget score is the target of "
                   "steps_to_base (without it, steps_to_base is null)")
    s.add_argument("--base-untrained", help="the model before it was taught the task, attacked as the negative "
                   "control beside the model (default: the finetune input named by the model cards of --base or "
                   "--model); without one the probe and MIA figures are labelled uncalibrated")
    s.add_argument("--control", choices=["untaught", RETAIN_FINETUNE], default="untaught",
                   help="the negative control: untaught (default) attacks the model before it was taught the task "
                   f"as it is; {RETAIN_FINETUNE} first fine-tunes it on the task's retain data only, with the "
                   "settings the fine-tuned model's card records, cached under --out/control")
    add_task_args(s)
    s.add_argument("--attacks", metavar="NAMES", help="comma-separated attacks to run, or 'all' (default: relearn, "
                   f"relearn_disjoint, mia, probe, format_shift); names: {', '.join(ATTACKS)}")
    s.set_defaults(fn=cmd_attack)
