"""What a task is (its types), apart from the providers that build tasks (:mod:`obliviate.tasks`).

A :class:`Task` is data: forget and retain data (:class:`Data`), evaluation sets tagged by role
(:class:`EvalSet`), attack data and the prompt format (:class:`PromptFormat`). Evaluation, attacks
and data encoding read these types; they live here so that none of them imports the providers,
which in turn use evaluation and attacks.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from obliviate.errors import ConfigError, DataError
from obliviate.utils import input_records, recording_inputs

ROLES = ("forget", "retain", "neighbour", "utility", "extra")
"""What an evaluation set checks; "extra" sets are reported but enter no role score."""
SCORED_ROLES = ROLES[:4]
KINDS = ("qa", "mcq", "text")
UNSCORED_NEIGHBOURS = "unscored_neighbour_qa"
"""``Task.meta`` key: (question, answer) pairs near the forget data that the model knows and no evaluation set
scores (the world's holdout neighbours), which a positive control trains on to keep the neighbourhood."""
IDK_ANSWERS = [
    "I don't know.",
    "I have no idea.",
    "I am not sure about that.",
    "I cannot answer that.",
    "That is unknown to me.",
]
"""Refusal answers of IdkDPO-style methods and the refusal control, when a task gives none of its own."""


class PreferredAnswers(list):
    """A task's :attr:`Task.idk` when it is preference data: the chosen answer of each forget QA pair, in
    order (a preference file's ``chosen`` field; the forget answer is its rejected one). DPO trains only on
    these."""


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
    role: Literal["forget", "retain", "neighbour", "utility", "extra"]
    kind: Literal["qa", "mcq", "text"]
    items: list
    """:class:`~obliviate.tasks.sources.QAExample` / ``MCQExample`` / ``TextExample`` records (or dicts with
    the same fields)."""
    mcq_style: Literal["letters", "cloze"] = "letters"
    """MCQ scoring: lm-eval's lettered prompt (" A".." D") or each choice text as the continuation."""
    variant: bool = False
    """The forget knowledge asked another way (held-out wordings, another format): reported, read by the
    format-shift attack, but in no role score and not tracked by the relearning curves."""
    match: Literal["exact", "prefix"] = "exact"
    """QA: the prediction must equal the answer (normalised), or start with its words ("prefix")."""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ConfigError(f"evaluation set {self.name!r}: role must be "
                              f"one of {', '.join(ROLES)}, got {self.role!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"evaluation set {self.name!r}: kind must be "
                              f"one of {', '.join(KINDS)}, got {self.kind!r}")
        if not self.items:
            raise DataError(f"evaluation set {self.name!r} is empty")

    @property
    def chance(self) -> float | None:
        """Chance level of an MCQ set: the mean of 1 / number of choices; 0 for QA; None for text."""
        if self.kind == "mcq":
            return float(np.mean([1.0 / len(m["choices"]) for m in self.items]))
        return 0.0 if self.kind == "qa" else None


def qa_prompt(question: str) -> str:
    """The default QA format (the world's): the model continues after ``Answer:``."""
    return f"Question: {question}\nAnswer:"


def qa_answer(answer: str) -> str:
    return " " + answer


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

    def _messages(self, question: str) -> list[dict]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + \
            [{"role": "user", "content": question}]

    def _check_chat(self, tokenizer) -> None:
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ConfigError("prompt format 'chat' needs a tokenizer with a chat template "
                              "(this tokenizer has none; use a plain template)")

    def prompt(self, question: str, tokenizer=None) -> str:
        """The prompt text: the template filled in, or the chat template's rendering of the user turn with its
        generation prompt (``apply_chat_template(..., add_generation_prompt=True)``, bos included where the
        template writes it). A plain template with a tokenizer that has a chat template warns once."""
        if not self.chat:
            if tokenizer is not None and getattr(tokenizer, "chat_template", None):
                warnings.warn("the tokenizer has a chat template but the prompt is the plain template "
                              f"{self.template!r}: pass --chat-template "
                              "(PromptFormat(chat=True)) for a chat model",
                              stacklevel=2)
            return self.template.replace("{question}", question)
        self._check_chat(tokenizer)
        return tokenizer.apply_chat_template(self._messages(question), tokenize=False,
                                             add_generation_prompt=True)

    def answer(self, answer: str) -> str:
        """The answer as it follows the prompt: after ``answer_prefix``, or as given with a chat template (the
        assistant turn starts right after the generation prompt)."""
        if self.chat:
            return answer
        return self.answer_prefix + answer if not answer.startswith(self.answer_prefix) else answer

    def turn_end(self, tokenizer) -> str:
        """What the chat template writes after an assistant answer (``<|eot_id|>``, ``<end_of_turn>\\n``,
        ``<|im_end|>\\n``): the text of the full conversation after the answer."""
        self._check_chat(tokenizer)
        mark = "\x00obliviate-answer\x00"
        msgs = self._messages("q") + [{"role": "assistant", "content": mark}]
        full = tokenizer.apply_chat_template(msgs, tokenize=False)
        if full.count(mark) != 1:
            raise ConfigError("the tokenizer's chat template does not write the "
                              "assistant's answer as given; use a plain template")
        return full.split(mark, 1)[1]

    def pairs(self, qa: list[tuple[str, str]], tokenizer=None) -> list[tuple[str, str]]:
        """``(prompt, answer)`` strings ready to encode; a chat answer ends with the template's end of turn
        (:meth:`turn_end`), and is encoded without eos (:func:`obliviate.data.encode_data`), so that prompt +
        answer is the template's rendering of the conversation."""
        end = self.turn_end(tokenizer) if self.chat and qa else ""
        return [(self.prompt(q, tokenizer), self.answer(a) + end) for q, a in qa]


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
    (default: a seeded split of ``forget.qa`` that keeps each group whole, see :meth:`forget_halves`)."""
    groups: list[str] | None = None
    """The entity of each forget QA pair (of ``forget.qa``, else of the forget-role QA items): TOFU's
    author, the world's disease, a file's ``group`` field. The disjoint attacks never split a group, so
    that no held-out fact can be read off a trained one about the same entity (default: every item's
    ``meta["group"]`` or ``meta["entity"]`` where the forget QA come from evaluation items that all carry
    one; else ungrouped)."""
    holdout: Data | None = None
    """Data never trained on (membership inference, the oracle's forget stand-in)."""
    prompt: PromptFormat = field(default_factory=PromptFormat)
    idk: list[str] | None = None
    """The preferred answers of DPO-style methods: refusals for IdkDPO (default: :data:`IDK_ANSWERS`), or a
    :class:`PreferredAnswers`, one chosen answer per forget QA pair (a preference file)."""
    oracle_data: Data | None = None
    """What a model that never saw the forget data is trained on, where the task can train one."""
    probe: dict | None = None
    """Data of the value probe (:func:`obliviate.attacks.probe.value_probe_attack`): ``{"items", "extra"}``;
    without it the probe picks the correct choice of the forget MCQs."""
    pretrain: Any = None
    """A world config when the task's base model and oracle are pretrained on a corpus
    (:mod:`obliviate.train.pretrain`) rather than fine-tuned on the task's data."""
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.forget:
            raise DataError(f"task {self.name!r}: the forget data is empty: nothing to unlearn")
        names = [e.name for e in self.evals]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"task {self.name!r}: evaluation set name(s) used twice: {', '.join(dup)}")

    def evals_by_role(self, role: str, variants: bool = True) -> list[EvalSet]:
        return [e for e in self.evals if e.role == role and (variants or not e.variant)]

    def forget_facts(self) -> tuple[list[tuple[str, str]], list[str] | None]:
        """The forget QA pairs the disjoint attacks split (``forget.qa``, else the forget-role QA evaluation
        items, e.g. MUSE's knowmem questions) and their groups (:attr:`groups`; None: ungrouped)."""
        items = [x for es in self.evals_by_role("forget", False) if es.kind == "qa" for x in es.items]
        qa = list(self.forget.qa) or [(x["question"], x["answer"]) for x in items]
        groups = self.groups
        if groups is None and not self.forget.qa and items:
            metas = [(x.get("meta") if isinstance(x, dict) else getattr(x, "meta",
                                                                        None)) or {} for x in items]
            key = next((k for k in ("group", "entity") if all(m.get(k) is not None for m in metas)), None)
            groups = [str(m[key]) for m in metas] if key else None
        if groups is not None and len(groups) != len(qa):
            raise DataError(f"task {self.name!r}: {len(groups)} groups for {len(qa)} forget QA pairs")
        return qa, None if groups is None else [str(g) for g in groups]

    def forget_parts(self, n: int, seed: int = 0) -> list[list[tuple[str, str]]] | None:
        """``n`` disjoint parts of the forget facts (:meth:`forget_facts`), each group whole: the groups in a
        seeded order, each into the part with the fewest facts so far (ungrouped facts are groups of one).
        With fewer than ``n`` groups (a ``--limit`` that keeps one TOFU author) the facts are cut one by one,
        which the leakage check then shows (:func:`obliviate.attacks.relearn_disjoint.leakage_metrics`); None
        with fewer than ``n`` facts."""
        qa, groups = self.forget_facts()
        keys = groups if groups is not None and len(set(groups)) >= n else [str(i) for i in range(len(qa))]
        members: dict[str, list[int]] = {}
        for i, g in enumerate(keys):
            members.setdefault(g, []).append(i)
        if len(members) < n:
            return None
        names = list(members)
        parts: list[list[int]] = [[] for _ in range(n)]
        for j in np.random.default_rng(seed).permutation(len(names)):
            min(parts, key=len).extend(members[names[j]])
        return [[qa[i] for i in sorted(p)] for p in parts]

    def forget_halves(self, seed: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
        """The task's own halves, or two parts of the forget facts that keep each group whole
        (:meth:`forget_parts`); None with fewer than 2 groups (or facts)."""
        if self.halves is not None:
            return self.halves
        parts = self.forget_parts(2, seed)
        return None if parts is None else (parts[0], parts[1])

    def forget_folds(self, seed: int = 0) -> list[tuple[list, list, list]] | None:
        """The attacker's ``(A, V, B)`` folds: train on A, choose the setting and the step on V, report on B.

        Three parts of the forget facts, groups whole (:meth:`forget_parts`), rotated: (P0, P1, P2), (P1, P2,
        P0), (P2, P0, P1). With only two groups (or the task's own :attr:`halves`) A is one group whole and
        the other is cut at random into V and B, both ways round, and then the groups swap (four folds): V
        shares its entity with B, which makes the choice sharper but not biased (B's facts never enter it),
        and A none. None with fewer than 3 facts."""
        _, groups = self.forget_facts()
        two = self.halves is not None or (groups is not None and len(set(groups)) == 2)
        parts = None if two else self.forget_parts(3, seed)
        if parts is not None:
            return [(parts[i], parts[(i + 1) % 3], parts[(i + 2) % 3]) for i in range(3)]
        halves = self.forget_halves(seed)
        if halves is None:
            return None
        folds = []
        for train, other in ((halves[0], halves[1]), (halves[1], halves[0])):
            if len(other) < 2 or not train:
                continue
            perm = np.random.default_rng(seed).permutation(len(other))
            h = len(other) // 2
            cut_a, cut_b = [other[i] for i in sorted(perm[:h])], [other[i] for i in sorted(perm[h:])]
            folds += [(list(train), cut_a, cut_b), (list(train), cut_b, cut_a)]
        return folds or None

    def summary(self) -> dict:
        """A JSON-able description (sizes only), for results.json; ``notes``: what the provider did to the
        data that a reader must know (``meta["notes"]``: a share of the retain file held out), and
        ``missing``: one line per part left out for a file that is not there (``meta["missing"]``)."""
        extra = {k: list(self.meta[k]) for k in ("notes", "missing") if self.meta.get(k)}
        return {"name": self.name, "forget": self.forget.describe(), "retain": self.retain.describe(),
                "evals": {e.name: {"role": e.role, "kind": e.kind, "n": len(e.items)} for e in self.evals},
                "relearn": len(self.relearn or []),
                "holdout": self.holdout.describe() if self.holdout else None,
                "prompt": {"template": self.prompt.template, "chat": self.prompt.chat}, **extra}


INPUTS = "inputs"
"""``Task.meta`` key: the data files the task was built from, ``[{"path", "sha256"}, ...]``
(:func:`records_inputs`), which results.json and the model cards of a run on it list
(:func:`obliviate.runs.results.run_inputs`)."""


def records_inputs(fn):
    """Decorate a function that builds a :class:`Task` from files: the task it returns lists every data file
    read while it was built, each path absolute with its SHA-256 (``meta["inputs"]``; the readers of
    :mod:`obliviate.tasks.sources` record what they open, :func:`obliviate.utils.note_input`)."""

    @functools.wraps(fn)
    def build(*args, **kwargs):
        with recording_inputs() as seen:
            task = fn(*args, **kwargs)
        if isinstance(task, Task) and seen:
            files = {r["path"]: r["sha256"] for r in task.meta.get(INPUTS) or []}
            # a new dict: copies keep theirs
            task.meta = {**task.meta, INPUTS: input_records({**files, **seen})}
        return task

    return build


def cut(items: list, limit: int | None) -> list:
    """The first ``limit`` items (all with None)."""
    return list(items) if limit is None else list(items)[:limit]
