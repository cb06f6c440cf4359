"""The three example shapes every benchmark loader returns.

Records are small dataclasses that can also be read like dicts
(``ex["question"]``), so they can be passed straight to functions that take
dicts, e.g. :func:`obliviate.eval.core.mcq_accuracy`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


class _Record:
    """Dict-style read access to a dataclass's fields."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class QAExample(_Record):
    """A question with a reference answer (TOFU, open questions, generic QA).

    ``perturbed_answers`` are wrong answers in the style of the (paraphrased)
    answer, used by the TOFU truth ratio; ``options`` are the four choices of
    TOFU's real_authors / world_facts files (the answer is one of them).
    """

    question: str
    answer: str
    split: str
    paraphrased_question: str | None = None
    paraphrased_answer: str | None = None
    perturbed_answers: list[str] | None = None
    options: list[str] | None = None
    meta: dict = field(default_factory=dict)


@dataclass
class MCQExample(_Record):
    """A multiple-choice question; ``choices[answer_index]`` is the correct one."""

    question: str
    choices: list[str]
    answer_index: int
    split: str
    subject: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def answer(self) -> str:
        return self.choices[self.answer_index]


@dataclass
class TextExample(_Record):
    """A piece of text (a prompt prefix, a sentence, a paragraph)."""

    text: str
    split: str
    meta: dict = field(default_factory=dict)
