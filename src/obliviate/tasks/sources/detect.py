"""The one detector of a user's file: the kind of its records (QA pairs, MCQs, texts) and the fields holding
each schema field, told from its first record. Every way a file is given goes through it (``eval --data``,
``--forget`` / ``--retain`` / ``--utility`` / ..., a task spec's entries,
:func:`~obliviate.tasks.sources.generic.load_records`), so a file one of them reads, the others read too. Its
rules: docs/benchmarks.md#your-own-files.
"""

from __future__ import annotations

import json
import re
from typing import Any

from obliviate.errors import DataError, setting
from obliviate.tasks.sources._io import LETTERS

SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "mcq": {"question": ("question", "prompt", "q", "query", "input", "stem", "instruction", "problem",
                         "goal",
                         "sentence", "ctx"),
            "choices": ("choices", "options", "candidates", "answers", "endings", "alternatives", "choice",
                        "option"),
            "answer_index": ("answer_index", "answer_idx", "label", "gold", "correct", "target", "answer",
                             "answerKey", "answer_key", "cop", "correct_answer", "correct_option",
                             "correct_choice",
                             "key")},
    "qa": {"question": ("question", "prompt", "q", "query", "input", "instruction", "problem"),
           "answer": ("answer", "response", "completion", "output", "target", "a", "gt", "reference",
                      "solution",
                      "ground_truth", "rejected")},
    "text": {"text": ("text", "content", "document", "body", "passage", "paragraph", "sentence", "abstract",
                      "article", "story")},
}
"""Per kind, the field names each schema field is looked for under, in order (the first that fits wins)."""

EVAL_KINDS = ("mcq", "qa", "text")
"""The order kinds are tried in for an evaluation file (an MCQ's question and answer would also read as a QA
pair)."""
TRAIN_KINDS = ("qa", "text", "mcq")
"""The order for training data (forget, retain, holdout, relearn): QA pairs or texts first; MCQs last, so that
an MCQ file gets the error that says MCQs are evaluation sets."""

GROUP_PREFIXES = ("", "op", "opt", "option", "options", "choice", "choices", "answer", "ans", "ending", "sol",
                  "candidate", "alternative", "alt")
"""The names a group of choice fields may share before its tags (``option1``, ``opa``, ``choice_0``,
``A``)."""
_TAGGED = re.compile(r"^(?P<prefix>[A-Za-z]*?)[ _-]?(?P<tag>\d+|[A-Ja-j])$")


def choice_group(rec: dict, used: set[str] = frozenset()) -> list[str] | None:
    """The fields of ``rec`` that hold one choice each, in order: a shared name (:data:`GROUP_PREFIXES`)
    followed by consecutive tags from 0 or 1 (``choice0``..``choice3``, ``option1``..``option4``) or from A
    (``A``..``D``, ``opa``..``opd``), every value a string; the longest such group (None without one, or with
    two as long)."""
    groups: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    for key, value in rec.items():
        m = _TAGGED.match(str(key))
        if key in used or not isinstance(value, str) or not m or m["prefix"].lower() not in GROUP_PREFIXES:
            continue
        tag = m["tag"]
        kind = "digit" if tag.isdigit() else ("upper" if tag.isupper() else "lower")
        groups.setdefault((m["prefix"], kind),
                          []).append((int(tag) if tag.isdigit() else ord(tag.upper()), key))
    found = []
    for (_, kind), members in groups.items():
        members.sort()
        tags = [t for t, _ in members]
        first = tags[0]
        if len(tags) >= 2 and first in ((0, 1) if kind == "digit" else (ord("A"),)) and \
                tags == list(range(first, first + len(tags))):
            found.append([k for _, k in members])
    found.sort(key=len, reverse=True)
    if not found or (len(found) > 1 and len(found[1]) == len(found[0])):
        return None
    return found[0]


def choice_texts(value: Any, strings: bool) -> tuple[list[str], list[str] | None] | None:
    """``(choices, labels)`` of one field's value if it holds MCQ choices (a list of strings; an object keyed
    A, B, ...; ARC's ``{text: [...], label: [...]}``; in CSV a JSON array), else None; ``labels`` only for
    ARC's shape."""
    if strings and isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if isinstance(value, dict):
        if set(value) == {"text", "label"} and isinstance(value["text"],
                                                          list) and isinstance(value["label"], list):
            texts, labels = value["text"], value["label"]
            if len(texts) == len(labels) and all(isinstance(x, str) for x in texts + labels):
                return (texts, [str(x) for x in labels]) if len(texts) >= 2 else None
            return None
        keys = sorted(value)
        if keys == list(LETTERS[: len(keys)]) and all(isinstance(v, str) for v in value.values()):
            return ([value[k] for k in keys], None) if len(keys) >= 2 else None
        return None
    if isinstance(value, list) and len(value) >= 2 and all(isinstance(v, str) for v in value):
        return value, None
    return None


def points_at_a_choice(value: Any, choices: list[str], labels: list[str] | None) -> bool:
    """Whether ``value`` can name one of ``choices``: an index (0- or 1-based), a letter, a label, or one
    choice's text."""
    n = len(choices)
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value <= n
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or not value.strip():
        return False
    v = value.strip()
    return (choices.count(value) == 1 or (labels is not None and v in labels)
            or (len(v) == 1 and v.upper() in LETTERS[:n]) or (v.isascii() and v.isdigit() and int(v) <= n))


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _named(rec: dict, names: tuple[str, ...], used: set[str], fits) -> str | None:
    """The first of ``names`` that ``rec`` has, unused, whose value ``fits``."""
    return next((n for n in names if n in rec and n not in used and fits(rec[n])), None)


def _only(rec: dict, used: set[str], fits) -> str | None:
    """The one unused field of ``rec`` whose value ``fits`` (None if none or several do)."""
    hits = [k for k, v in rec.items() if k not in used and fits(v)]
    return hits[0] if len(hits) == 1 else None


def _choices_of(rec: dict, spec: str, strings: bool) -> tuple[list[str], list[str] | None] | None:
    """The choices (and labels) a mapping's ``choices=spec`` gives in ``rec`` (``a+b+c``: one field each, or
    lists)."""
    keys = spec.split("+")
    if len(keys) == 1:
        return choice_texts(rec.get(keys[0]), strings)
    out: list[str] = []
    for k in keys:
        v = rec.get(k)
        got = choice_texts(v, strings) if not isinstance(v, str) else ([v], None)
        if got is None:
            return None
        out += got[0]
    return out, None


OWN_NAME_TYPES = {"question": str, "answer": str, "text": str, "choices": (list, dict, str),
                  "answer_index": (int, str, list)}
"""A schema field found under its own name counts as found when its value has this type, even empty or out of
range: the reader's own check then names what is wrong with it (``field 'question' is empty``)."""


def _fill(kind: str, rec: dict, mapping: dict[str, str], strings: bool,
          explicit: bool) -> tuple[dict[str, str], list[str]]:
    """``mapping`` with every schema field of ``kind`` it leaves out found in ``rec``, and the fields not
    found. ``explicit``: the kind was given, so a field no name fits may be the one field of its shape
    (``_only``); a kind being guessed goes by names alone."""
    out = dict(mapping)
    used = {part for spec in out.values() for part in str(spec).split("+")}
    syn = SYNONYMS[kind]
    missing = []

    def own(field: str, names: tuple[str, ...] = ()) -> str | None:
        """The field under its schema name (or one of ``names``, the reader's defaults) with a value of its
        type."""
        return next((n for n in (field,
                                 *names) if n in rec and n not in used and isinstance(rec[n], OWN_NAME_TYPES[
            field]) and not isinstance(rec[n], bool)), None)

    def put(field: str, key: str | None) -> None:
        """Map ``field`` to ``key``; a field found under a schema name stays unmapped (the reader's defaults
        apply: ``answer_index`` else ``answer`` per record)."""
        if key is None:
            missing.append(field)
            return
        if key != field and not (kind == "mcq" and key in ("answer", "answer_index")):
            out[field] = key
        used.update(key.split("+"))

    only = (lambda fits: _only(rec, used, fits)) if explicit else (lambda fits: None)
    if kind == "text":
        if "text" not in out:
            put("text", own("text") or _named(rec, syn["text"], used, _text) or only(_text))
        return out, missing
    if "question" not in out:
        put("question", own("question") or _named(rec, syn["question"], used, _text))
    if kind == "qa":
        if "answer" not in out:
            put("answer", own("answer") or _named(rec, syn["answer"], used, _text))
        return out, missing
    if "choices" not in out:
        shaped = lambda v: choice_texts(v, strings) is not None  # noqa: E731
        group = choice_group(rec, used)
        put("choices", own("choices") or _named(rec, syn["choices"], used, shaped)
            or ("+".join(group) if group else None) or only(shaped))
    if "answer_index" not in out and "answer" not in out:
        spec = out.get("choices", "choices" if "choices" in used else None)
        got = _choices_of(rec, spec, strings) if spec else None
        if own("answer_index", ("answer",)):
            put("answer_index", own("answer_index", ("answer",)))
        elif got is None:  # no choices to check an answer against: a field named as one is taken on trust
            if not _named(rec, syn["answer_index"], used,
                          lambda v: v is not None and not isinstance(v, bool)):
                missing.append("answer_index")
        else:
            fits = lambda v: points_at_a_choice(v, *got)  # noqa: E731
            put("answer_index", _named(rec, syn["answer_index"], used, fits) or only(fits))
    return out, missing


def detect(rec: dict, kind: str | None, mapping: dict[str, str], *, strings: bool, name: str, where: str,
           kinds: tuple[str, ...] = EVAL_KINDS) -> tuple[str, dict[str, str]]:
    """``(kind, mapping)`` of a file whose first record is ``rec`` (at ``where``, in the file called
    ``name``): ``kind`` as given, else the first of ``kinds`` (narrowed by the fields the mapping names) whose
    every field the record holds; ``mapping`` the one given, completed. ``strings``: the file's values are
    strings (CSV)."""
    order = [kind] if kind else _kinds_for(mapping, kinds)
    first_missing: list[str] = []
    for k in order:
        out, missing = _fill(k, rec, mapping, strings, explicit=kind is not None)
        if not missing and (kind or k != "qa" or _a_pair_not_an_mcq(rec, out, mapping, strings)):
            return k, out
        first_missing = first_missing or missing
    raise FieldsUnknown(name, where, [str(k) for k in rec], kind, first_missing if kind else [])


def _a_pair_not_an_mcq(rec: dict, qa: dict[str, str], mapping: dict[str, str], strings: bool) -> bool:
    """Whether a record read as a QA pair (training data try QA pairs first) is one: not an MCQ, or an MCQ
    whose answer field holds its correct choice's text (the question and its answer). An MCQ whose answer is a
    letter or an index is no QA pair ("B" would be the answer learnt)."""
    mcq, missing = _fill("mcq", rec, mapping, strings, explicit=False)
    if missing:
        return True
    got = _choices_of(rec, mcq.get("choices", "choices"), strings)
    answer = rec.get(qa.get("answer", "answer"))
    return got is not None and isinstance(answer, str) and got[0].count(answer) == 1


def _kinds_for(mapping: dict[str, str], kinds: tuple[str, ...]) -> list[str]:
    """The kinds a mapping's fields allow, in the order of ``kinds``."""
    named = set(mapping)
    if named & {"choices", "answer_index", "subject"}:
        return [k for k in kinds if k == "mcq"]
    if named & {"question", "answer"}:
        return [k for k in kinds if k in ("mcq", "qa")]
    if named == {"text"}:
        return [k for k in kinds if k == "text"]
    return list(kinds)


class FieldsUnknown(DataError):
    """A file whose kind or fields :func:`detect` cannot tell: one line naming the file's record (``where``),
    the fields seen and the mapping that would name them (:meth:`hint`)."""

    def __init__(self, name: str, where: str, keys: list[str], kind: str | None = None,
                 needed: list[str] = ()):
        self.name, self.where, self.keys, self.kind, self.needed = name, where, keys, kind, list(needed)
        super().__init__(self.hint(setting("api", "cli")))

    def fields(self) -> str:
        """The mapping that would name the fields not found: ``choices=FIELD,answer_index=FIELD``."""
        if self.kind:
            return ",".join(f"{f}=FIELD" for f in self.needed)
        return ("question=FIELD,answer=FIELD (MCQs: "
                "question=FIELD,choices=FIELD,answer_index=FIELD; texts: text=FIELD)")

    def hint(self, how: str) -> str:
        """The message, the mapping given in the syntax of ``how``: ``"cli"`` (``--mapping FILE=...``),
        ``"spec"`` (a task spec entry's ``mapping:``) or ``"api"`` (``mapping="..."``)."""
        if how not in ("cli", "spec", "api"):
            raise ValueError(f"how={how!r}: expected 'cli', 'spec' or 'api'")
        keys = [k if len(k) <= 40 else k[:37] + "..." for k in self.keys[:12]]
        shown = ", ".join(keys) + (", ..." if len(self.keys) > 12 else "") if keys else "none"
        if self.kind:
            label = {"question": "question", "answer": "answer", "choices": "choices", "text": "text",
                     "answer_index": "correct choice (an index, a letter or its text)"}
            one = {"qa": "a QA pair", "mcq": "an MCQ", "text": "a text"}[self.kind]
            what = (f"cannot find the {' and the '.join(label[f] for f in self.needed)} "
                    f"of {one} among its fields ({shown})")
        else:
            what = f"cannot tell whether it holds QA pairs, MCQs or texts from its fields ({shown})"
        fields = self.fields()
        if how == "cli":
            first, _, rest = fields.partition(" ")
            name = f"--mapping {self.name}={first}" + (f" {rest}" if rest else "")
            how_to = f"name them with {name}"
        elif how == "spec":
            how_to = (f"give its entry a mapping (and kind), e.g. {{path: {self.name}, "
                      f"{f'kind: {self.kind}, ' if self.kind else ''}mapping: '{fields.split(' ')[0]}'}}")
        else:
            how_to = f"name them with mapping='{fields.split(' ')[0]}'" + (
                "" if self.kind else f" {fields.partition(' ')[2]}")
        return f"{self.where}: {what}; {how_to}"
