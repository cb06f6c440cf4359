"""``obliviate verdict-check``: the verdict's own error rates, simulated around a finished comparison."""

from __future__ import annotations

from obliviate.cli.args import count_arg, seed_arg
from obliviate.cli.inputs import check_out_dir
from obliviate.pipelines.verdict_check import load_template, run_verdict_check


def cmd_verdict_check(args) -> None:
    template = load_template(args.results, args.items)  # a missing or bad file: one line, before any work
    check_out_dir(args.out, [template.path])
    print(run_verdict_check(template, args.out, trials=args.trials, seed=args.seed,
                            progress=not args.no_progress)[1], end="")


def register(sub) -> None:
    s = sub.add_parser("verdict-check", help="the verdict's own error rates: simulate item-level noise "
                                             "around a comparison's results and "
                                             "hold them against issue #57's bounds")
    s.add_argument("--results", required=True, metavar="PATH", help="results.json of a finished `obliviate "
                                                                    "compare` or `demo` run, or of "
                                                                    "`obliviate attack --base` (or its "
                                                                    "directory): its base model, oracle and "
                                                                    "positive controls are "
                                                                    "taken as the true rates")
    s.add_argument("--out", required=True, help="directory for verdict_check.json, verdict_check.md, "
                                                "power.png (results.json is written here last)")
    s.add_argument("--trials", type=count_arg, default=1000, help="simulated comparisons per scenario "
                                                                  "(default 1000: a bound of 1%% "
                                                                  "is shown by at most 3 hits)")
    s.add_argument("--seed", type=seed_arg, default=0, help="seed of the simulation: an integer in [0, "
                                                            "2**32); the same seed gives the same shares")
    s.add_argument("--items", type=count_arg, help="items of the reads whose results record no count "
                                                   "(results written before issue #57; default: the base "
                                                   "model's forget items, else the oracle band's)")
    s.add_argument("--no-progress", action="store_true", help="hide the progress bar (shown "
                                                              "only when stderr is a terminal)")
    s.set_defaults(fn=cmd_verdict_check)
