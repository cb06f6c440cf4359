"""``obliviate world``: generate the synthetic world and save it."""

from __future__ import annotations

from obliviate.cli.args import add_common
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.pipelines.world import write_world
from obliviate.tasks.world import WorldConfig


def cmd_world(args) -> None:
    check_out_dir(args.out, [])
    cfg = build_config(WorldConfig, args.config, args.overrides, base={"seed": args.seed})
    for line in write_world(cfg, args.out)[1]:
        print(line)


def register(sub) -> None:
    s = sub.add_parser("world", help="generate the synthetic world and save it")
    add_common(s)
    s.set_defaults(fn=cmd_world)
