"""``obliviate attack``: relearning (related corpus, disjoint halves) and probe attacks on a model."""

from __future__ import annotations

import argparse
import json

from obliviate.cli.args import add_cache_arg, add_common, add_model_args, add_task_args, no_cache
from obliviate.cli.compare import add_attacks_arg
from obliviate.cli.inputs import (check_out_dir, device_and_dtype, input_paths, load_model_args,
                                  model_fingerprint,
                                  task_from_args)
from obliviate.evidence.retain_control import NO_CONTROL, RETAIN_FINETUNE
from obliviate.pipelines.attack import (CONTROLS, UNTAUGHT, attack_settings, check_attack_inputs,
                                        negative_control_input, run_attack)
from obliviate.runs.cost import cost_line
from obliviate.runs.results import input_fingerprint


def cmd_attack(args) -> None:
    """The run of :mod:`obliviate.pipelines.attack`, then what it found: the metrics, the probe and MIA
    against the negative control, and last the verdict (or the line that says what gives one)."""
    # --device cuda without CUDA, float16 training on the CPU: before anything is said or read
    device_and_dtype(args)
    untrained, kind = negative_control_input(args.model, base=args.base, base_untrained=args.base_untrained,
                                             oracle=args.oracle, control=args.control,
                                             allow_hub=args.allow_hub)
    check_out_dir(args.out, input_paths(args, args.base, untrained))
    cfg = attack_settings(args.seed, args.config, no_cache(args), attacks=args.attacks)
    task = task_from_args(args, seed=cfg.seed, world=cfg.world)
    kind = check_attack_inputs(cfg, task, untrained, kind, control=args.control)
    ctl_args = argparse.Namespace(**{**vars(args), "tokenizer": args.tokenizer or args.model,
                                     "adapter": None})
    fingerprint = {**model_fingerprint(args, "model"), "base": input_fingerprint(args.base)}
    res = run_attack(task, cfg, args.out, model=args.model, load=lambda p: load_model_args(args, path=p),
                     base=args.base, untrained=untrained, kind=kind, control=args.control,
                     load_control=lambda p: load_model_args(ctl_args, path=p), fingerprint=fingerprint,
                     progress=not args.no_progress)
    metrics = res["metrics"]
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
                      if not k.endswith(("_curve", "_per_layer"))}, indent=1))
    for name, key in (("probe", "probe_acc"), ("MIA (Min-K%)", "mia_auc_min_k")):
        if key in metrics:
            ctl = metrics.get(f"{key[:-4]}_control_acc" if key == "probe_acc" else f"{key}_control")
            state = "calibrated" if metrics[f"{key.split('_')[0]}_calibrated"] else "uncalibrated"
            print(f"{name} {metrics[key]:.3f}, negative control "
                  f"{'n/a' if ctl is None else f'{ctl:.3f}'}: {state}")
    print(cost_line(res["cost"]))
    print(res["no_verdict"] or res["verdict"]["line"])  # the last line: the verdict, or what gives one


def register(sub) -> None:
    s = sub.add_parser("attack", help="relearning (related corpus, disjoint halves) and probe attacks on a "
                       "model's forget knowledge")
    add_common(s)
    add_cache_arg(s)
    add_model_args(s, help="the model to attack (e.g. an unlearned one): a directory or hub id")
    s.add_argument("--base", help="the model before unlearning: its forget score is the target of "
                                  "steps_to_base, and with a negative control the positive controls are "
                                  "built from it for the verdict (without it, "
                                  "steps_to_base is null and there is no verdict)")
    s.add_argument("--base-untrained", help="the model before it was taught the task, from which the "
                                            "negative control is made (default: the finetune input named by "
                                            "the model cards of --base or --model); without one there is no "
                                            "verdict and the probe and MIA figures are labelled uncalibrated")
    s.add_argument("--oracle", help="a model that never saw the forget data, attacked as it is as the "
                                    "negative control (instead of one made from "
                                    "the model before it was taught the task)")
    s.add_argument("--control", choices=CONTROLS, help=f"the negative control: {RETAIN_FINETUNE} (the "
                                                       "default wherever the model before it was taught the "
                                                       "task is known) fine-tunes that model on the task's "
                                                       "retain data only, with the settings the fine-tuned "
                                                       "model's card records, kept in the cache of the "
                                                       f"controls and linked at --out/control; {UNTAUGHT} "
                                                       f"attacks it as it is; {NO_CONTROL} "
                                                       "attacks none (no verdict)")
    add_task_args(s)
    add_attacks_arg(s, "attack")
    s.set_defaults(fn=cmd_attack)
