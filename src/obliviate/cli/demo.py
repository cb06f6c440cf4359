"""``obliviate demo``: the main job, ``obliviate compare`` on the world with the demo's defaults."""

from __future__ import annotations

from obliviate.cli.args import add_common
from obliviate.cli.compare import add_attacks_arg, run_compare_command
from obliviate.pipelines.compare.run import DEMO


def cmd_demo(args) -> None:
    """The main job: ``compare`` on the world with :data:`~obliviate.pipelines.compare.run.DEMO` (GradDiff,
    NPO, SimNPO and RMU beside the base model and the controls, each attacked once, then the report)."""
    run_compare_command(args, DEMO)


def register(sub) -> None:
    s = sub.add_parser("demo", help="the main job: world, base model, unlearning, attacks, report")
    add_common(s, example="runs.npo.train.steps=30")
    add_attacks_arg(s, "demo")
    s.set_defaults(fn=cmd_demo)
