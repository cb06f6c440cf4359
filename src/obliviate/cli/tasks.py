"""``obliviate tasks``: list the task providers, the names ``--task`` takes."""

from __future__ import annotations

from obliviate.tasks import TASKS, task_names


def cmd_tasks(args) -> None:
    names = task_names()
    w = max(len(n) for n in names)
    for name in names:
        prov = TASKS[name]
        print(f"{name:<{w}}  {prov.help}")
        if getattr(args, "verbose", False) and prov.arguments is not None:
            print(f"{'':<{w}}  arguments: {', '.join(prov.arguments())}")


def register(sub) -> None:
    s = sub.add_parser("tasks", help="list the task providers (--task NAME[:ARGUMENT]), one per line")
    s.add_argument("-v", "--verbose", action="store_true", help="also list each provider's valid arguments "
                   "(e.g. the EMBER concepts)")
    s.set_defaults(fn=cmd_tasks)
