"""Load a user's own data file into the common schema, with a field mapping.

:func:`load_records` reads ``.jsonl``, ``.json``, ``.csv`` / ``.tsv`` and ``.txt`` files as QA pairs,
MCQs or texts; the mapping (a dict or ``"question=prompt,answer=target"``) maps schema field names to
the file's. Every problem raises a one-line :class:`DataError` naming the file and the line. Formats,
fields and mapping rules: docs/benchmarks.md#your-own-files.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from obliviate.tasks.sources import _io
from obliviate.tasks.sources.detect import EVAL_KINDS, choice_texts, detect
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample
from obliviate.config import show
from obliviate.errors import ConfigError, DataError

OPTION_SEED = 0
"""Seed of the option order of MCQs whose choices are built from several fields (:func:`shuffled_choices`)."""

FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # kind: (required, optional)
    "qa": (("question", "answer"),
           ("paraphrased_question", "paraphrased_answer", "perturbed_answers", "options")),
    "mcq": (("question", "choices"), ("answer_index", "answer", "subject")),
    "text": (("text",), ()),
}
LIST_FIELDS = ("choices", "perturbed_answers", "options")  # may name several file fields joined by "+"
FORMATS = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".txt": "txt"}
SPLIT_BY = ("line", "blank")
MAX_CHOICES = len(_io.LETTERS)

log = logging.getLogger(__name__)


def parse_mapping(spec: str | None) -> dict[str, str]:
    """``"question=prompt,answer=target"`` -> ``{"question": "prompt", "answer": "target"}`` ("" or None ->
    {})."""
    if not spec or not spec.strip():
        return {}
    out: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ConfigError(f"bad field mapping {part.strip()!r} in {spec!r}: expected "
                              "schema_field=file_field")
        if key in out:
            raise ConfigError(f"field mapping {spec!r} maps {key!r} twice")
        out[key] = value
    return out


def load_records(path: str | os.PathLike, kind: str | None = None,
                 mapping: dict[str, str] | str | None = None,
                 split: str | None = None, limit: int | None = None,
                 split_by: str | None = None) -> list[QAExample] | list[MCQExample] | list[TextExample]:
    """Read ``path`` (.jsonl, .json, .csv, .tsv or .txt; see the module docstring) as ``kind`` examples.

    ``kind``: qa, mcq or text; None: told from the first record
    (:func:`~obliviate.tasks.sources.detect.detect`, which also finds the fields the mapping leaves out).
    ``mapping``: a dict or a :func:`parse_mapping` string. ``split`` defaults to the file stem. ``limit``:
    stop after that many records (JSON Lines, CSV and text files are then read no further, but for an MCQ
    file's answers and choices, read to its end to tell whether its indices count from 0 or 1: the same file
    gives the same answers with any limit). ``split_by``: ``"line"`` (default) or ``"blank"`` for .txt files;
    it may also be given in the mapping as ``split_by=blank``, as may ``index_base=0|1`` (MCQ answers given as
    indices: 0- or 1-based; default: told from the whole file, :func:`index_base`).
    """
    return read_records(path, kind, mapping, split, limit, split_by)[1]


def read_records(path: str | os.PathLike, kind: str | None = None,
                 mapping: dict[str, str] | str | None = None,
                 split: str | None = None, limit: int | None = None, split_by: str | None = None, *,
                 kinds: tuple[str, ...] = EVAL_KINDS) -> tuple[str, list]:
    """``(kind, examples)`` of :func:`load_records`; ``kinds``: the kinds to try, in order, when ``kind`` is
    None (:data:`~obliviate.tasks.sources.detect.EVAL_KINDS`, or ``TRAIN_KINDS`` for training data)."""
    if kind is not None and kind not in FIELDS:
        raise ConfigError(f"unknown example kind {kind!r} (valid: {', '.join(FIELDS)})")
    mapping = parse_mapping(mapping) if isinstance(mapping, str) or mapping is None else dict(mapping)
    split_by = _split_by(split_by, mapping.pop("split_by", None))
    base = _index_base_arg(mapping.pop("index_base", None))
    _check_mapping(kind, mapping)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit={limit!r}: expected a positive integer or None")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path.name}: unsupported file type {path.suffix or '(none)'!r} "
                        f"(expected {', '.join(FORMATS)})")
    if fmt == "txt":
        kind = kind or "text"
        if kind != "text":
            raise DataError(f"{path.name}: a .txt file holds plain text (kind 'text'); "
                            f"give {kind} records as .jsonl, .json, .csv or .tsv")
    if split_by is not None and fmt != "txt":
        raise ConfigError(f"split_by={split_by} applies to .txt files, not {path.name}")

    strings = fmt in ("csv", "tsv")
    records = _iter_records(path, path.name, fmt, mapping.get("text", "text"), split_by or "line")
    first = next(records, None)
    if first is None:
        raise DataError(f"{path.name}: no records")
    if fmt != "txt":  # the one detector: the kind, and the fields the mapping leaves out
        kind, mapping = detect(first[1], kind, mapping, strings=strings, name=path.name, where=first[0],
                               kinds=kinds)
        _check_mapping(kind, mapping)
    required, optional = FIELDS[kind]
    src = {f: _keys(f, mapping.get(f, f)) for f in required + optional}
    if kind == "mcq" and ("answer" in mapping or "answer_index" in mapping):
        src = {f: k for f, k in src.items() if f not in ("answer", "answer_index") or f in mapping}
    must = set(required) | set(mapping)
    rows = [first, *itertools.islice(records, None if limit is None else limit - 1)]
    if kind == "mcq" and base is None:  # told from the whole file: the records past the limit too
        base = index_base(itertools.chain(rows, records), src, strings, path.name)
    return kind, [_example(kind, rec, src, must, where, split or path.stem, strings, base or 0)
                  for where, rec in rows]


def _check_mapping(kind: str | None, mapping: dict[str, str]) -> None:
    """Refuse a mapping that names a field no kind (or not ``kind``) has."""
    valid = (FIELDS[kind][0] + FIELDS[kind][1] if kind
             else tuple(dict.fromkeys(f for k in FIELDS for f in FIELDS[k][0] + FIELDS[k][1])))
    unknown = [k for k in mapping if k not in valid]
    if unknown:
        raise ConfigError(f"field mapping names unknown {kind or 'record'} field(s) "
                          f"{', '.join(map(repr, unknown))} (valid: {', '.join(valid)})")


def _index_base_arg(value: str | None) -> int | None:
    if value is None:
        return None
    if str(value).strip() not in ("0", "1"):
        raise ConfigError(f"index_base={value!r}: expected 0 or 1 "
                          "(whether MCQ answer indices count from 0 or 1)")
    return int(value)


def index_base(rows: Iterable[tuple[str, dict]], src: dict[str, list[str]], strings: bool, name: str) -> int:
    """Whether a file's MCQ answer indices count from 0 or 1, told from all its records (``rows``: past a
    limit, only their answer and choice fields are looked at; a record that cannot be read there ends the
    look, as it would end a read of the whole file): 1 where no answer index is 0 and one equals its record's
    number of choices (which only a 1-based index can), else 0; either way said on the log where the file has
    answer indices but no 0 among them. A letter, a label or a choice's text is not an index and says nothing
    here."""
    fields = [keys[0] for keys in (src.get("answer_index"), src.get("answer")) if keys and len(keys) == 1]
    top = None
    indices = False
    rows = iter(rows)
    while True:
        try:
            where, rec = next(rows)
        except (StopIteration, DataError):
            break
        key = next((k for k in fields if rec.get(k) is not None), None)
        if key is None:
            continue
        v = rec.get(key)
        texts = _choice_texts_lenient(rec, src.get("choices", []), strings)
        if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit() and v not in texts:
            v = int(v.strip())
        if isinstance(v, bool) or not isinstance(v, int):
            continue
        if v == 0:
            return 0
        indices = True
        if top is None and texts and v == len(texts):
            top = (where, v, len(texts))
    if top is not None:
        log.info("%s: answer indices read as 1-based (none is 0, and %s's is %d of %d choices; index_base=0 "
                 "in the mapping says otherwise)", name, *top)
        return 1
    if indices:
        log.info("%s: answer indices read as 0-based, though the file does not say (none is 0, and none "
                 "equals its record's number of choices); index_base=1 "
                 "in the mapping reads them as 1-based", name)
    return 0


def _choice_texts_lenient(rec: dict, keys: list[str], strings: bool) -> list[str]:
    """The choices of ``rec`` as far as they can be read (no error: the record's own check comes later)."""
    out: list[str] = []
    for k in keys:
        v = rec.get(k)
        if isinstance(v, str) and not (strings and len(keys) == 1):
            out.append(v)
            continue
        got = choice_texts(v, strings)
        out += got[0] if got else []
    return out


def load_jsonl(path: str | os.PathLike, kind: str | None = None, mapping: dict[str, str] | str | None = None,
               split: str | None = None, limit: int | None = None):
    """Former name of :func:`load_records` (which reads every supported format, not only JSON Lines)."""
    return load_records(path, kind, mapping, split, limit)


def _split_by(arg: str | None, in_mapping: str | None) -> str | None:
    if arg is not None and in_mapping is not None and arg != in_mapping:
        raise ConfigError(f"split_by={arg!r} but the mapping says split_by={in_mapping!r}")
    value = arg if arg is not None else in_mapping
    if value is not None and value not in SPLIT_BY:
        raise ConfigError(f"split_by={value!r}: expected one of {', '.join(SPLIT_BY)}")
    return value


def _keys(field: str, spec: str) -> list[str]:
    keys = [k.strip() for k in spec.split("+")] if field in LIST_FIELDS else [spec]
    if not all(keys):
        raise ConfigError(f"field mapping {field}={spec!r} has an empty part")
    return keys


# ------------------------------------------------------------------ readers: (where, record)

def _iter_records(path: Path, name: str, fmt: str, text_key: str,
                  split_by: str) -> Iterator[tuple[str, dict]]:
    if fmt == "jsonl":
        return _iter_jsonl(path, name)
    if fmt == "json":
        return _iter_json(path, name)
    if fmt in ("csv", "tsv"):
        return _iter_csv(path, name, "," if fmt == "csv" else "\t")
    return _iter_txt(path, name, text_key, split_by)


def _iter_jsonl(path: Path, name: str) -> Iterator[tuple[str, dict]]:
    """JSON Lines; a file whose first line is not a whole JSON object but the file is one JSON
    document (a pretty-printed array, ``{"data": [...]}``) is read as that document."""
    first = True
    for n, line in _io.iter_text_lines(path, name):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        try:
            rec = _io.parse_json(line, where, one_line=True)
        except DataError as e:
            if not first:
                raise
            rec = e
        if first and not isinstance(rec, dict):
            first = False
            try:
                doc = _io.read_json(path, name)
            except DataError as doc_error:
                if not isinstance(rec, DataError):
                    raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}") from None
                # a lone "[" or "{" opens a pretty-printed document: its error says where it breaks
                raise (doc_error if line.strip() in ("[", "{") else rec) from None
            yield from _doc_records(doc, name)
            return
        first = False
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        yield where, rec


def _iter_json(path: Path, name: str) -> Iterator[tuple[str, dict]]:
    text = _io.read_text(path, name)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        if e.msg == "Extra data" and _is_object(first):  # JSON Lines named .json
            yield from _iter_jsonl(path, name)
            return
        doc = _io.parse_json(text, name)  # raises the one-line DataError
    except (RecursionError, ValueError):
        doc = _io.parse_json(text, name)  # likewise
    yield from _doc_records(doc, name)


def _is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _doc_records(doc: Any, name: str) -> Iterator[tuple[str, dict]]:
    """Records of a JSON array, or of the one list-of-objects value of a JSON object."""
    if isinstance(doc, dict):
        keys = [k for k,
                v in doc.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)]
        lists = [k for k, v in doc.items() if isinstance(v, list)]
        if not keys and len(lists) == 1 and not doc[lists[0]]:
            return  # {"data": []}: no records
        if len(keys) != 1:
            found = (f"several keys hold lists of objects ({', '.join(map(repr, keys))})" if keys else
                     "no key holds a list of objects (keys: "
                     f"{', '.join(map(repr, list(doc)[:8])) or 'none'})")
            raise DataError(f"{name}: expected a JSON array of records or an "
                            f"object with one key holding them, but {found}")
        doc = doc[keys[0]]
    if not isinstance(doc, list):
        raise DataError(f"{name}: expected a JSON array of records, got {type(doc).__name__}")
    for i, rec in enumerate(doc, 1):
        where = f"{name} record {i}"
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        yield where, rec


class _Lines:
    """The lines of a file for :func:`csv.reader`, remembering the number of the last one read."""

    def __init__(self, lines: Iterator[tuple[int, str]]):
        self.lines, self.n = lines, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        self.n, line = next(self.lines)
        return line


def _iter_csv(path: Path, name: str, delimiter: str) -> Iterator[tuple[str, dict]]:
    lines = _Lines(_io.iter_text_lines(path, name))
    reader = csv.reader(lines, delimiter=delimiter)
    header: list[str] | None = None
    header_line = end = 0
    while True:
        start = end + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(f"{name} line {lines.n}: invalid "
                            f"{'CSV' if delimiter == ',' else 'TSV'} ({e})") from None
        end = lines.n
        if not row or not any(c.strip() for c in row):
            continue
        where = f"{name} line {start}"
        if header is None:
            header, header_line = [c.strip() for c in row], start
            dup = sorted({c for c in header if header.count(c) > 1})
            if dup:
                raise DataError(f"{where}: the header names column(s) "
                                f"{', '.join(map(repr, dup))} more than once")
            continue
        if len(row) != len(header):
            raise DataError(f"{where}: {len(row)} fields, but the header "
                            f"(line {header_line}) names {len(header)}")
        yield where, dict(zip(header, row))


def _iter_txt(path: Path, name: str, key: str, split_by: str) -> Iterator[tuple[str, dict]]:
    para: list[str] = []
    start = 0
    for n, line in _io.iter_text_lines(path, name):
        line = line.rstrip("\r\n")
        if split_by == "line":
            if line.strip():
                yield f"{name} line {n}", {key: line}
        elif line.strip():
            start = start if para else n
            para.append(line)
        elif para:
            yield f"{name} line {start}", {key: "\n".join(para)}
            para = []
    if para:
        yield f"{name} line {start}", {key: "\n".join(para)}


# ------------------------------------------------------------------ records -> examples

def _example(kind: str, rec: dict, src: dict[str, list[str]], must: set[str], where: str, split: str,
             strings: bool, base: int = 0):
    """The example of one record (``base``: what an answer index counts from, 0 or 1)."""
    vals: dict[str, dict[str, Any]] = {}  # schema field -> {file field: value}
    for f, keys in src.items():
        got = {k: rec[k] for k in keys if _present(rec, k, strings and f not in must)}
        if len(got) == len(keys):
            vals[f] = got
        elif f in must:
            key = next(k for k in keys if k not in got)
            raise DataError(f"{where}: missing field {key!r}" + (f" (mapped to {f!r})" if key != f else ""))
    if kind == "mcq":
        if "answer_index" in vals and "answer_index" not in must:
            vals.pop("answer", None)  # defaults: answer_index wins; a stray 'answer' stays in meta
        if "answer_index" not in vals and "answer" not in vals:
            raise DataError(f"{where}: missing field 'answer_index' (or 'answer', the correct choice's text)")
    used = {k for got in vals.values() for k in got}
    meta = {k: v for k, v in rec.items() if k not in used}
    s = {f: _str(vals[f], where, nonempty=f in ("question", "answer", "text"))
         for f in ("question", "text", "subject", "paraphrased_question", "paraphrased_answer")
         + (("answer",) if kind == "qa" else ()) if f in vals}
    if kind == "text":
        return TextExample(s["text"], split, meta)
    if kind == "qa":
        # options keyed A, B, ... (MedQA's), as an MCQ's choices
        if "options" in vals and len(vals["options"]) == 1:
            (key, value), = vals["options"].items()
            got = choice_texts(value, strings) if isinstance(value, dict) else None
            vals["options"] = {key: got[0]} if got else vals["options"]
        lists = {f: _str_list(vals[f], where, strings)[0] for f in ("perturbed_answers",
                                                                    "options") if f in vals}
        return QAExample(s["question"], s["answer"], split, s.get("paraphrased_question"),
                         s.get("paraphrased_answer"),
                         lists.get("perturbed_answers"), lists.get("options"), meta)
    choices, spans, labels = _choices(vals["choices"], where, strings)
    idx = {f: _answer(vals[f], choices, spans, where, strings, text=f == "answer", labels=labels, base=base)
           for f in ("answer_index", "answer") if f in vals}
    if len(set(idx.values())) > 1:
        (ki,), (ka,) = vals["answer_index"], vals["answer"]
        raise DataError(f"{where}: field {ki!r} says choice {_io.LETTERS[idx['answer_index']]} but field "
                        f"{ka!r} says choice {_io.LETTERS[idx['answer']]}")
    answer = next(iter(idx.values()))
    if "answer" in vals and next(iter(vals["answer"])) in spans and len(spans) > 1:
        # a right answer's field plus wrong ones' (choices=true_answer+false_answer,answer=true_answer):
        # shuffled,
        # or the answer would sit at the same letter every time
        choices, answer = shuffled_choices(choices, answer, s["question"])
    return MCQExample(s["question"], choices, answer, split, s.get("subject"), meta)


def shuffled_choices(choices: list[str], answer: int, key: str,
                     seed: int = OPTION_SEED) -> tuple[list[str], int]:
    """``choices`` in a seeded order and the correct choice's new index. An MCQ whose choices concatenate
    several fields (the right answer's, then the wrong ones') would otherwise have its answer at the same
    letter every time, and the score would measure a preference for that letter. The order depends on ``seed``
    and ``key`` (the question: the same question always gets the same order, whatever the file's record
    order)."""
    import numpy as np

    perm = np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))]).permutation(len(choices))
    return [choices[i] for i in perm], int(np.flatnonzero(perm == answer)[0])


def _present(rec: dict, key: str, empty_is_absent: bool) -> bool:
    return key in rec and rec[key] is not None and not (empty_is_absent and rec[key] == "")


def _str(got: dict[str, Any], where: str, nonempty: bool) -> str:
    (key, value), = got.items()
    s = _io.as_str(value, key, where)
    if nonempty and not s.strip():
        raise DataError(f"{where}: field {key!r} is empty")
    return s


def _str_list(got: dict[str, Any], where: str, strings: bool) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """Concatenate the parts of a list field; also return each part's (start, stop) in the result."""
    out: list[str] = []
    spans: dict[str, tuple[int, int]] = {}
    single = len(got) == 1
    for key, value in got.items():
        if strings and isinstance(value, str) and (single or value.lstrip().startswith("[")):
            value = _json_cell(value, key, where, required=single)
        if isinstance(value, str) and not single:
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            kinds = "a list of strings" if single else "a string or a list of strings"
            hint = " (in CSV: a JSON array such as [\"a\", \"b\"])" if strings and single else ""
            raise DataError(f"{where}: field {key!r} must be {kinds}{hint}")
        for v in value:
            _io.unicode_text(v, key, where)
        spans[key] = (len(out), len(out) + len(value))
        out.extend(value)
    return out, spans


def _json_cell(cell: str, key: str, where: str, required: bool) -> Any:
    """A CSV cell holding a JSON array; when not ``required``, a cell that is not one stays a string."""
    try:
        value = json.loads(cell)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    if required:
        raise DataError(f"{where}: field {key!r} must be a JSON array of strings, got {cell[:40]!r}")
    return cell


def _choices(got: dict[str, Any], where: str,
             strings: bool) -> tuple[list[str], dict[str, tuple[int, int]], list[str] | None]:
    """The choices of a record, each part's span in them, and their labels (ARC's ``{text, label}`` shape
    only)."""
    labels = None
    if len(got) == 1:
        (key, value), = got.items()
        # ARC: {"text": [...], "label": [...]}
        if isinstance(value, dict) and set(value) == {"text", "label"}:
            texts, labels = value["text"], value["label"]
            if not isinstance(texts, list) or not isinstance(labels, list) or len(texts) != len(labels):
                raise DataError(f"{where}: field {key!r} holds 'text' and "
                                "'label', which must be lists of one length")
            labels = [str(x).strip() for x in labels]
            got = {key: texts}
        elif isinstance(value, dict):
            keys = list(value)
            expected = list(_io.LETTERS[: len(keys)])
            if sorted(keys) != expected:
                raise DataError(f"{where}: field {key!r} is an object whose keys {keys} are not A, B, C, ...")
            got = {key: [value[k] for k in expected]}
    choices, spans = _str_list(got, where, strings)
    name = "+".join(got)
    if len(choices) < 2:
        raise DataError(f"{where}: field {name!r} has {len(choices)} entries, expected at least 2")
    if len(choices) > MAX_CHOICES:
        raise DataError(f"{where}: field {name!r} has {len(choices)} "
                        f"choices; at most {MAX_CHOICES} (A-J) are supported")
    for key, (a, b) in spans.items():
        for i in range(a, b):
            if not choices[i].strip():
                raise DataError(f"{where}: field {key!r} has an empty choice (entry {i - a + 1})")
    return choices, spans, labels


def _answer(got: dict[str, Any], choices: list[str], spans: dict[str, tuple[int, int]], where: str,
            strings: bool, text: bool, labels: list[str] | None = None, base: int = 0) -> int:
    """The 0-based correct choice. ``text``: the field holds the correct choice's text (``answer``). A string
    is the text of one choice, else one label (``labels``), else a letter, else an index; an index counts from
    ``base``."""
    (key, value), = got.items()
    if text and key in spans and spans[key][1] - spans[key][0] == 1:
        return spans[key][0]  # answer=true_answer with choices=true_answer+false_answer: its position
    if text and isinstance(value, list) and len(value) == 1:
        value = value[0]
    if strings and not text and value.strip().isascii() and value.strip().isdigit():
        value = int(value)  # CSV answer_index "2": an index (integers are strings there), never a text match
    if not isinstance(value, str):
        return _index(value, len(choices), key, where, base)
    hits = [i for i, c in enumerate(choices) if c == value]
    if len(hits) == 1:
        return hits[0]  # text wins over the letter reading
    if len(hits) > 1:
        raise DataError(f"{where}: field {key!r} = {show(value)} matches {len(hits)} choices")
    v = value.strip()
    if not v:
        raise DataError(f"{where}: field {key!r} is empty")
    if labels is not None and labels.count(v) == 1:
        return labels.index(v)
    if len(v) == 1 and v.upper() in _io.LETTERS:
        return _io.as_index(v, len(choices), key, where, letters=True)
    if v.isascii() and v.isdigit():  # a JSON "2": an index, as in CSV, where no choice reads "2"
        return _index(int(v), len(choices), key, where, base)
    raise DataError(f"{where}: field {key!r} = {show(value)} is "
                    "not an index, a letter, or exactly one choice")


def _index(value: Any, n: int, key: str, where: str, base: int) -> int:
    """The 0-based choice of an index ``value`` counted from ``base`` (0 or 1)."""
    if base == 1 and isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= n:
            raise DataError(f"{where}: field {key!r} = {value} is out of range "
                            f"for {n} choices (the file's indices count from 1)")
        return value - 1
    return _io.as_index(value, n, key, where, letters=True)
