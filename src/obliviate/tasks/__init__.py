"""Tasks: what a run forgets, what it keeps, and how it checks both.

A :class:`Task` is data (lm-eval's lesson). Each provider is one file in this package, registered by
:func:`register_task` and named by a spec ``provider[:argument]`` (``world``, ``tofu:forget10``,
``file:SPEC.yaml``, ...: docs/tasks.md has the table); providers are imported lazily (:func:`task_names`), so
adding one is one file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from obliviate.errors import ConfigError
from obliviate.registry import Registry
from obliviate.tasks.base import KINDS, ROLES, Data, EvalSet, PromptFormat, Task, cut, records_inputs

# ------------------------------------------------------------------ registry

@dataclass
class Provider:
    name: str
    fn: Callable[..., Task]
    help: str
    arguments: Callable[[], list[str]] | None = None
    """Valid arguments (e.g. the 18 EMBER concepts), for tests and ``--help``; None: free-form."""
    needs_argument: bool = False


TASKS = Registry("task", package=__name__)
"""``name -> Provider``; the first look-up imports every provider file of this package."""


def register_task(name: str, help: str, arguments: Callable[[], list[str]] | None = None,
                  needs_argument: bool = False):
    """Function decorator: ``fn(argument: str | None, **options) -> Task`` provides task ``name``."""

    def deco(fn):
        known = TASKS.registered(name)  # the same function again (a module imported twice) keeps its entry
        if known is None or known.fn is not fn:
            TASKS.add(name, Provider(name, fn, help, arguments, needs_argument))
        return fn

    return deco


def task_names() -> list[str]:
    return TASKS.names()


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"tofu:forget10"`` -> ``("tofu", "forget10")``; ``"world"`` -> ``("world", None)``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("--task is empty: give a task such as 'world', 'tofu:forget10' or 'file:spec.yaml'")
    name, sep, arg = spec.strip().partition(":")
    return name.strip().lower(), (arg.strip() if sep else None) or None


def check_task_spec(spec: str) -> Provider:
    """The provider of ``spec``, or a one-line error naming it; loads no data."""
    name, arg = parse_spec(spec)
    prov = TASKS.lookup(name)
    if prov.needs_argument and not arg:
        valid = prov.arguments() if prov.arguments else None
        raise ConfigError(f"task {name!r} needs an argument: {name}:<...>"
                          + (f" (one of {', '.join(valid)})" if valid else ""))
    return prov


@records_inputs
def load_task(spec: str | Task, **options: Any) -> Task:
    """The task named by ``spec`` (a :class:`Task` is returned as it is); it lists the data files it was built
    from (``meta["inputs"]``: :func:`~obliviate.tasks.base.records_inputs`).

    ``options`` are passed to the provider (e.g. ``seed``, ``root`` for the data directory,
    ``limit`` to cut every set to its first N records).
    """
    if isinstance(spec, Task):
        return spec
    prov = check_task_spec(spec)
    _, arg = parse_spec(spec)
    return prov.fn(arg, **options)


__all__ = ["Data", "EvalSet", "KINDS", "PromptFormat", "ROLES", "TASKS", "Task", "check_task_spec", "cut",
           "load_task", "parse_spec", "register_task", "task_names"]
