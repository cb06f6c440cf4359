"""``obliviate unlearn``: unlearn a task's forget data from a model, evaluate before and after
(:mod:`obliviate.pipelines.unlearn`; ``--requests``: :mod:`obliviate.pipelines.sequential`)."""

from __future__ import annotations

from obliviate.cli.args import add_common, add_eval_args, add_model_args, add_task_args
from obliviate.cli.inputs import (check_out_dir, checked_run, fingerprint, input_paths, mapping_from_args,
                                  task_files,
                                  tune_log)
from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import eval_kwargs
from obliviate.pipelines import sequential
from obliviate.pipelines.unlearn import run_unlearn
from obliviate.runs.results import input_fingerprint
from obliviate.tasks.files import FieldsUnknown


def cmd_unlearn(args) -> None:
    if args.requests:  # sequential unlearning: obliviate.pipelines.sequential
        return cmd_requests(args)
    cfg, task, model, tok, preset, split = checked_run(args, tuning=args.tune)
    _, info = run_unlearn(model, tok, task, cfg, args.out, preset=preset, base_model=args.model,
                          fingerprint=fingerprint(args), split=split, tune_log=tune_log(args),
                          progress=not args.no_progress)
    for line in ([info["tune_line"]] if "tune_line" in info else []) + info["lines"]:
        print(line)


# ------------------------------------------------------------ --requests: sequential unlearning (issue #31,
# item 5)

def cmd_requests(args) -> None:
    """``unlearn --requests A,B,...``: the requests in order on the same model, every metric after each
    (:mod:`obliviate.pipelines.sequential`); every check before the model is loaded."""
    if args.tune:
        raise ConfigError("--tune and --requests: tune on one forget set (without --requests), then pass the "
                          "chosen settings (--config OUT/tuned.yaml) to the sequential run")
    paths = sequential.request_paths(args.requests, args.forget)
    check_out_dir(args.out, input_paths(args, *map(str, paths)))
    if not args.task:  # the files shorthand: the forget data are the requests
        args.forget = [str(p) for p in paths]
    mapping = mapping_from_args(args.mapping, {**task_files(args), "forget": [str(p) for p in paths]})
    try:
        requests = sequential.read_requests(paths, mapping=mapping, template=args.template,
                                            chat=args.chat_template,
                                            limit=args.limit)
    except FieldsUnknown as e:  # the hint in the command line's syntax
        raise DataError(f"--requests: {e.hint('cli')}") from None
    cfg, task, model, tok, preset, _ = checked_run(args)
    for line in sequential.run_sequential(model, tok, task, requests, cfg, args.out, preset=preset,
                                          base_model=str(args.model),
                                          eval_kw=eval_kwargs(cfg, not args.no_progress),
                                          fingerprint={**fingerprint(args),
                                                       "adapter": input_fingerprint(args.adapter)},
                                          progress=not args.no_progress):
        print(line)


def register(sub) -> None:
    s = sub.add_parser("unlearn", help="unlearn a task's forget data from a model, evaluate before and after")
    add_common(s, example="unlearn.train.steps=100 unlearn.params.beta=0.2")
    add_model_args(s, aliases=("--base",), help="the model to unlearn from: a directory "
                                                "or hub id (--base: the former spelling)")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`; case-insensitive)")
    add_task_args(s)
    add_eval_args(s)
    s.add_argument("--tune", action="store_true", help="first choose lr, steps and the method's own weight "
                                                       "on a validation split of the forget and retain pairs "
                                                       "(as obliviate tune), then report on the rest")
    s.add_argument("--requests", metavar="A.jsonl,B.jsonl,...", help="sequential unlearning: apply these "
                                                                     "forget files one after another to the "
                                                                     "same model (the retain data stay the "
                                                                     "task's), evaluate every metric and the "
                                                                     "cheap attacks after each; the curve "
                                                                     "goes to report.md and results.json, "
                                                                     "and a rerun resumes after the last "
                                                                     "finished request (docs/tasks.md, "
                                                                     "\"Sequential unlearning\")")
    s.set_defaults(fn=cmd_unlearn)
