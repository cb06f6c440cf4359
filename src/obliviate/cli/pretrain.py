"""``obliviate pretrain``: pretrain a tiny model on the world (resumable)."""

from __future__ import annotations

from obliviate.cli.args import add_common, seeded
from obliviate.cli.inputs import check_out_dir
from obliviate.config import build_config
from obliviate.pipelines.pretrain import run_pretrain
from obliviate.train.pretrain import PretrainConfig


def cmd_pretrain(args) -> None:
    check_out_dir(args.out, [])
    cfg = build_config(PretrainConfig, args.config, args.overrides,
                       base=seeded(args.seed, ["seed", "world.seed"]))
    _, lines = run_pretrain(cfg, args.out, restart=args.restart, progress=not args.no_progress)
    for line in lines:
        print(line)


def register(sub) -> None:
    s = sub.add_parser("pretrain", help="pretrain a tiny model on the world")
    add_common(s)
    s.add_argument("--restart", action="store_true", help="ignore checkpoints in --out and start again")
    s.set_defaults(fn=cmd_pretrain)
