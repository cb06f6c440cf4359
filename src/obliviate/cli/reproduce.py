"""``obliviate reproduce NAME --out DIR [--quick]``: run a paper reproduction (:mod:`obliviate.papers`);
``--render-only DIR`` re-renders a finished one's report from its ``results.json``."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time

from obliviate.cli.args import add_common
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.papers import available, get_recipe, render_only, run_recipe


def recorded_command(argv: list[str] | None = None) -> str:
    """The command line as typed (for the report's "Made by" line)."""
    return "obliviate " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


def cmd_reproduce(args) -> None:
    if args.render_only:
        render_only(args.name, args.render_only)
        print(f"{args.name}: report {args.render_only}/report.md rendered from its results.json")
        return
    if not args.out:
        raise ConfigError("reproduce: --out DIR is required (or --render-only DIR)")
    check_out_dir(args.out, [])
    config_cls = get_recipe(args.name)[0]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    base = {"seed": args.seed}
    if args.quick:
        base["quick"] = True
    cfg = build_config(config_cls, args.config, args.overrides, base=base)
    if "command" in fields and not cfg.command:
        cfg.command = recorded_command()
    t = time.time()
    out = run_recipe(args.name, cfg, args.out, progress=not args.no_progress)
    print(f"{args.name}: done in {(time.time() - t) / 60:.1f} min; report {out / 'report.md'}, "
          f"results {out / 'results.json'}")


def register(sub) -> None:
    names = ", ".join(available())
    s = sub.add_parser("reproduce", help=f"reproduce a paper's experiments at tiny scale: {names}")
    s.add_argument("name", metavar="NAME", help=f"recipe: {names}")
    s.add_argument("--quick", action="store_true", help="a small, fast version of the recipe")
    s.add_argument("--render-only", metavar="DIR", help="re-render DIR/report.md and its plots from "
                                                        "DIR/results.json, training nothing (the run's "
                                                        "settings come from that file: --out, --quick and "
                                                        "overrides are not used)")
    add_common(s, out_required=False)
    s.set_defaults(fn=cmd_reproduce)
