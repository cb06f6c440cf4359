"""Tasks: what a run forgets, what it keeps, and how it checks both.

A :class:`Task` is data (lm-eval's lesson): forget and retain data (QA pairs and/or
documents), evaluation sets tagged by role, attack data and the prompt format. Each
provider is one file in this package, registered by :func:`register_task`, and is
named on the command line by a spec ``provider[:argument]``:

- ``world`` (the embedded default, :mod:`.world`);
- ``tofu:forget01|forget05|forget10`` (:mod:`.tofu`);
- ``ember:<concept>`` (:mod:`.ember`);
- ``wmdp:bio|cyber`` (:mod:`.wmdp`);
- ``muse:news|books`` (:mod:`.muse`);
- ``file:SPEC.yaml``, the user's own files (:mod:`.files`).

Providers are imported lazily (:func:`task_names`), so adding one is adding one file.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from obliviate.errors import ConfigError, DataError

ROLES = ("forget", "retain", "neighbour", "utility")
KINDS = ("qa", "mcq", "text")


@dataclass
class Data:
    """Training data: ``qa`` as (question, answer) pairs, ``docs`` as raw texts (loss on every token)."""

    qa: list[tuple[str, str]] = field(default_factory=list)
    docs: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.qa) + len(self.docs)

    def __bool__(self) -> bool:
        return len(self) > 0

    def describe(self) -> str:
        parts = [f"{len(self.qa)} QA pairs"] if self.qa else []
        parts += [f"{len(self.docs)} documents"] if self.docs else []
        return " + ".join(parts) or "nothing"


@dataclass
class EvalSet:
    """One evaluation set: ``kind`` qa (exact match, ROUGE-L, answer probability), mcq (log-likelihood
    accuracy against its chance level) or text (token loss / perplexity); ``role`` says what it checks."""

    name: str
    role: Literal["forget", "retain", "neighbour", "utility"]
    kind: Literal["qa", "mcq", "text"]
    items: list
    """:class:`~obliviate.benchmarks.QAExample` / ``MCQExample`` / ``TextExample`` records (or dicts with
    the same fields)."""
    mcq_style: Literal["letters", "cloze"] = "letters"
    """MCQ scoring: lm-eval's lettered prompt (" A".." D") or each choice text as the continuation."""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ConfigError(f"evaluation set {self.name!r}: role must be one of {', '.join(ROLES)}, "
                              f"got {self.role!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"evaluation set {self.name!r}: kind must be one of {', '.join(KINDS)}, "
                              f"got {self.kind!r}")
        if not self.items:
            raise DataError(f"evaluation set {self.name!r} is empty")

    @property
    def chance(self) -> float | None:
        """Chance level of an MCQ set: the mean of 1 / number of choices; 0 for QA; None for text."""
        if self.kind == "mcq":
            return float(np.mean([1.0 / len(m["choices"]) for m in self.items]))
        return 0.0 if self.kind == "qa" else None


@dataclass
class PromptFormat:
    """How a question becomes a prompt: a plain ``template`` with ``{question}``, or the tokenizer's
    chat template (``chat=True``; the question is the user turn, the answer follows the generation prompt)."""

    template: str = "Question: {question}\nAnswer:"
    answer_prefix: str = " "
    """Put before the answer (the world and TOFU answer after a space)."""
    chat: bool = False
    system: str | None = None

    def __post_init__(self):
        if not self.chat and "{question}" not in self.template:
            raise ConfigError(f"prompt template {self.template!r} has no {{question}} placeholder")

    def prompt(self, question: str, tokenizer=None) -> str:
        if not self.chat:
            return self.template.replace("{question}", question)
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ConfigError("prompt format 'chat' needs a tokenizer with a chat template "
                              "(this tokenizer has none; use a plain template)")
        msgs = ([{"role": "system", "content": self.system}] if self.system else []) + \
            [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def answer(self, answer: str) -> str:
        return self.answer_prefix + answer if not answer.startswith(self.answer_prefix) else answer

    def pairs(self, qa: list[tuple[str, str]], tokenizer=None) -> list[tuple[str, str]]:
        """``(prompt, answer)`` strings ready to encode."""
        return [(self.prompt(q, tokenizer), self.answer(a)) for q, a in qa]


@dataclass
class Task:
    """Everything a run needs to know about what to forget and how to check it."""

    name: str
    forget: Data
    retain: Data
    evals: list[EvalSet] = field(default_factory=list)
    relearn: list[str] | None = None
    """A related corpus for the relearning attack (texts that do not state the forget answers)."""
    halves: tuple[list[tuple[str, str]], list[tuple[str, str]]] | None = None
    """Disjoint halves of the forget facts, for relearning on one and testing on the other
    (default: a seeded split of ``forget.qa``, see :meth:`forget_halves`)."""
    holdout: Data | None = None
    """Data never trained on (membership inference, the oracle's forget stand-in)."""
    prompt: PromptFormat = field(default_factory=PromptFormat)
    idk: list[str] | None = None
    """Refusal answers for IdkDPO-style methods (default: :data:`obliviate.executor.IDK_ANSWERS`)."""
    oracle_data: Data | None = None
    """What a model that never saw the forget data is trained on, where the task can train one."""
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.forget:
            raise DataError(f"task {self.name!r}: the forget data is empty: nothing to unlearn")
        names = [e.name for e in self.evals]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"task {self.name!r}: evaluation set name(s) used twice: {', '.join(dup)}")

    def evals_by_role(self, role: str) -> list[EvalSet]:
        return [e for e in self.evals if e.role == role]

    def forget_halves(self, seed: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
        """The task's own halves, or a seeded even split of the forget QA pairs (of the forget-role QA evaluation
        sets when the forget data are documents, e.g. MUSE's knowmem questions); None with fewer than 2."""
        if self.halves is not None:
            return self.halves
        qa = list(self.forget.qa) or [(x["question"], x["answer"]) for es in self.evals_by_role("forget")
                                      if es.kind == "qa" for x in es.items]
        if len(qa) < 2:
            return None
        perm = np.random.default_rng(seed).permutation(len(qa))
        h = len(qa) // 2
        return [qa[i] for i in sorted(perm[:h])], [qa[i] for i in sorted(perm[h:])]

    def summary(self) -> dict:
        """A JSON-able description (sizes only), for results.json."""
        return {"name": self.name, "forget": self.forget.describe(), "retain": self.retain.describe(),
                "evals": {e.name: {"role": e.role, "kind": e.kind, "n": len(e.items)} for e in self.evals},
                "relearn": len(self.relearn or []), "holdout": self.holdout.describe() if self.holdout else None,
                "prompt": {"template": self.prompt.template, "chat": self.prompt.chat}}


# ------------------------------------------------------------------ registry

@dataclass
class Provider:
    name: str
    fn: Callable[..., Task]
    help: str
    arguments: Callable[[], list[str]] | None = None
    """Valid arguments (e.g. the 18 EMBER concepts), for tests and ``--help``; None: free-form."""
    needs_argument: bool = False


TASKS: dict[str, Provider] = {}


def register_task(name: str, help: str, arguments: Callable[[], list[str]] | None = None,
                  needs_argument: bool = False):
    """Function decorator: ``fn(argument: str | None, **options) -> Task`` provides task ``name``."""

    def deco(fn):
        if name in TASKS and TASKS[name].fn is not fn:
            raise RuntimeError(f"task provider {name!r} registered twice")
        TASKS[name] = Provider(name, fn, help, arguments, needs_argument)
        return fn

    return deco


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


def task_names() -> list[str]:
    _load_all()
    return sorted(TASKS)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"tofu:forget10"`` -> ``("tofu", "forget10")``; ``"world"`` -> ``("world", None)``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("--task is empty: give a task such as 'world', 'tofu:forget10' or 'file:spec.yaml'")
    name, sep, arg = spec.strip().partition(":")
    return name.strip().lower(), (arg.strip() if sep else None) or None


def check_task_spec(spec: str) -> Provider:
    """The provider of ``spec``, or a one-line error naming it; loads no data."""
    name, arg = parse_spec(spec)
    _load_all()
    if name not in TASKS:
        import difflib

        close = difflib.get_close_matches(name, TASKS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown task {spec!r}{hint}; known: {', '.join(sorted(TASKS))}")
    prov = TASKS[name]
    if prov.needs_argument and not arg:
        valid = prov.arguments() if prov.arguments else None
        raise ConfigError(f"task {name!r} needs an argument: {name}:<...>"
                          + (f" (one of {', '.join(valid)})" if valid else ""))
    return prov


def load_task(spec: str | Task, **options: Any) -> Task:
    """The task named by ``spec`` (a :class:`Task` is returned as it is).

    ``options`` are passed to the provider (e.g. ``seed``, ``root`` for the data directory,
    ``limit`` to cut every set to its first N records).
    """
    if isinstance(spec, Task):
        return spec
    prov = check_task_spec(spec)
    _, arg = parse_spec(spec)
    return prov.fn(arg, **options)


def cut(items: list, limit: int | None) -> list:
    """The first ``limit`` items (all with None)."""
    return list(items) if limit is None else list(items)[:limit]


__all__ = ["Data", "EvalSet", "KINDS", "PromptFormat", "ROLES", "TASKS", "Task", "check_task_spec", "cut",
           "load_task", "parse_spec", "register_task", "task_names"]
