"""What a metric is: a compute function registered with :func:`register_metric`, in the file that defines it
(docs/evaluation.md, "A metric is one file").

A metric declares its name (what a task asks for, ``task.meta["metrics"]``), its result key, the data it reads
(:class:`Need`) and a one-line help. :func:`obliviate.eval.suite.task_metrics` runs the metrics asked for
whose data the task has and leaves the others out, one line each saying which data is missing. :data:`METRICS`
imports every module of :mod:`obliviate.eval` on its first look-up, so adding a metric is adding a file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from obliviate.errors import ConfigError
from obliviate.registry import Registry
from obliviate.tasks.base import Task


@dataclass(frozen=True)
class Need:
    """Data a metric reads: ``has(task, reference)`` says whether ``task`` has it (``reference``: whether a
    reference model is given), ``why(task)`` is the one line saying what is missing when it has not."""

    name: str
    has: Callable[[Task, bool], bool]
    why: Callable[[Task], str]


def forget_examples(task: Task, tokenizer=None) -> list:
    """The forget data as ``(prompt, answer)`` pairs in the task's format, else its documents."""
    if task.forget.qa:
        return task.prompt.pairs(task.forget.qa, tokenizer)
    return list(task.forget.docs)


def holdout_examples(task: Task, tokenizer=None) -> list | None:
    """The holdout as the forget data's kind (pairs or documents); None without a holdout of that kind."""
    h = task.holdout
    if not h:
        return None
    if task.forget.qa:
        return task.prompt.pairs(h.qa, tokenizer) if h.qa else None
    return list(h.docs) or None


def _no_holdout(task: Task) -> str:
    where = task.meta.get("holdout_file")
    return f"no holdout split{f': looked for {where}' if where else f' in task {task.name!r}'}"


FORGET = Need("forget", lambda task, reference: bool(task.forget.qa or task.forget.docs),
              lambda task: f"no forget data in task {task.name!r}")
"""The forget data (:func:`forget_examples`: QA pairs in the task's format, else documents)."""
HOLDOUT = Need("holdout", lambda task, reference: holdout_examples(task) is not None, _no_holdout)
"""A holdout of the forget data's kind (:func:`holdout_examples`): the non-members of a membership
inference."""
REFERENCE = Need("reference", lambda task, reference: reference, lambda task: "no reference model given")
"""A reference model (``task_metrics(reference_model=...)``), sharing the model's tokenizer."""


@dataclass
class MetricRun:
    """What every metric of one :func:`~obliviate.eval.suite.task_metrics` call reads. ``wanted``: the names
    of the metrics this call computes, so that one pass serving several metrics computes all of them at once
    (:meth:`once`)."""

    model: Any
    tokenizer: Any
    task: Task
    wanted: tuple[str, ...]
    batch_size: int
    k: float
    """The Min-K% / Min-K%++ fraction."""
    p: float
    """GradNorm's norm."""
    add_eos: bool
    """Whether an eos is scored after each answer."""
    reference_model: Any
    cache: dict = field(default_factory=dict)

    def once(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, computed once per call and ``key`` (a pass several metrics read)."""
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]

    @property
    def forget(self) -> list:
        """:func:`forget_examples` of the task, in the tokenizer's format."""
        return self.once("forget", lambda: forget_examples(self.task, self.tokenizer))

    @property
    def holdout(self) -> list | None:
        """:func:`holdout_examples` of the task, in the tokenizer's format."""
        return self.once("holdout", lambda: holdout_examples(self.task, self.tokenizer))


@dataclass(frozen=True)
class Metric:
    """One registered metric: what :func:`register_metric` declared."""

    name: str
    """What a task asks for (``task.meta["metrics"]``, ``eval --metrics``)."""
    key: str
    """The result key."""
    needs: tuple[Need, ...]
    help: str
    compute: Callable[[MetricRun], Any]
    """``compute(run)``: the value, or a dict holding it under :attr:`key` and what is recorded beside it (a
    budget, ...)."""

    def missing(self, task: Task, reference: bool = False) -> Need | None:
        """The first of :attr:`needs` that ``task`` lacks (``reference``: whether a reference model is
        given)."""
        return next((n for n in self.needs if not n.has(task, reference)), None)


METRICS = Registry("metric", package="obliviate.eval")
"""``name -> Metric``: every registered metric (docs/evaluation.md, "A metric is one file"): OpenUnlearning's
handlers by name (:mod:`obliviate.eval.memorization`, :mod:`obliviate.eval.mia`) and MUSE's per-model metrics
(:mod:`obliviate.eval.six_way`)."""


def register_metric(name: str, *, needs: Sequence[Need], help: str, key: str | None = None) -> Callable:
    """Decorator: register ``compute(run: MetricRun)`` as metric ``name`` (result key ``key``, default
    ``name``) reading the data ``needs``; returns the function itself."""
    if not needs or not all(isinstance(n, Need) for n in needs):
        raise TypeError(f"metric {name!r}: needs must be Need objects (FORGET, HOLDOUT, ...), got {needs!r}")

    def deco(compute):
        METRICS.add(name, Metric(name, key or name, tuple(needs), help, compute))
        return compute

    return deco


def requested_metrics(task: Task) -> tuple[str, ...]:
    """The metric names ``task.meta["metrics"]`` asks for (none by default), each checked against
    :data:`METRICS`."""
    names = task.meta.get("metrics") or ()
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ConfigError(f"task {task.name!r}: meta['metrics'] must be "
                          f"a list of metric names, got {names!r:.80}")
    for n in names:
        METRICS.lookup(n)
    return tuple(dict.fromkeys(names))


def left_out(task: Task, names: Sequence[str], reference: bool = False) -> dict[str, Need]:
    """``key -> the need it lacks`` for each of the metrics ``names`` whose data ``task`` lacks
    (``reference``: whether a reference model is given), in the order asked."""
    metrics = [METRICS.lookup(n) for n in dict.fromkeys(names)]
    return {m.key: need for m in metrics if (need := m.missing(task, reference)) is not None}


def unavailable(task: Task, names: Sequence[str], reference: bool = False) -> list[str]:
    """One line per missing data of ``names`` that :func:`~obliviate.eval.suite.task_metrics` leaves out,
    saying what is missing and which keys are not reported (``reference``: whether a reference model is
    given)."""
    groups: dict[Need, list[str]] = {}
    for key, need in left_out(task, names, reference).items():
        groups.setdefault(need, []).append(key)
    return [f"{need.why(task)}; {', '.join(keys)} not reported" for need, keys in groups.items()]


def asking_for(task: Task, names: Sequence[str]) -> Task:
    """A copy of ``task`` that asks for the registered metrics ``names`` too (after those it asks for), each
    name checked against :data:`METRICS` (an unknown one is one error line naming it), before any model is
    loaded."""
    names = [str(n).strip() for n in names]
    if not names or not all(names):
        raise ConfigError(f"metrics: expected registered metric names, got {list(names)!r:.80}; known: "
                          f"{', '.join(METRICS.names())}")
    for n in names:
        METRICS.lookup(n)
    return dataclasses.replace(task,
                               meta={**task.meta,
                                     "metrics": list(dict.fromkeys([*requested_metrics(task), *names]))})
