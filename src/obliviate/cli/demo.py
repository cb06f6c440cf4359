"""``obliviate demo``: the main job, the world demo comparison (``obliviate compare`` on the world)."""

from __future__ import annotations

from obliviate.cli.args import add_common
from obliviate.cli.compare import run_compare_command


def cmd_demo(args) -> None:
    """The main job: base and oracle, then GradDiff, NPO, SimNPO and RMU, then the attacks, then the report."""
    run_compare_command(args)


def register(sub) -> None:
    s = sub.add_parser("demo", help="the main job: world, base model, unlearning, attacks, report")
    add_common(s)
    s.set_defaults(fn=cmd_demo)
