"""``obliviate tune``: a method's lr, steps and own weight for a model and task, under a keep constraint."""

from __future__ import annotations

from obliviate.cli.args import add_common, add_eval_args, add_model_args, add_task_args
from obliviate.cli.inputs import checked_run, fingerprint, tune_log
from obliviate.pipelines.unlearn import run_tune


def cmd_tune(args) -> None:
    cfg, task, model, tok, preset, split = checked_run(args, tuning=True)
    _, lines = run_tune(model, tok, cfg, split, args.out, preset=preset, fingerprint=fingerprint(args),
                        progress=not args.no_progress, tune_log=tune_log(args))
    for line in lines:
        print(line)


def register(sub) -> None:
    s = sub.add_parser("tune", help="choose a method's settings for a model and task: 24 trials over the "
                                    "method's own search space, the lowest forget score that keeps 0.9 of "
                                    "retain and neighbours (else the best trade-off, said so), on a validation "
                                    "split; writes the chosen settings for unlearn --config")
    add_common(s, example="tune.budget=8 unlearn.train.steps=40")
    add_model_args(s, help="the model to tune for: a directory or hub id")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`; case-insensitive)")
    add_task_args(s)
    add_eval_args(s)
    s.set_defaults(fn=cmd_tune, tune=True)
