"""Load a user's own JSON Lines file into the common schema, with a field mapping.

``mapping`` maps *schema* field names to the *file's* field names, e.g.
``{"question": "prompt", "answer": "target"}`` or, for MCQ,
``{"question": "q", "choices": "opts", "answer_index": "label"}``. Schema fields not
in the mapping are looked up under their own name. Required fields must be present in
every record; an optional field named explicitly in the mapping is required too.
Record fields that no schema field uses are kept in ``meta``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from obliviate.benchmarks import _io
from obliviate.benchmarks.schema import MCQExample, QAExample, TextExample
from obliviate.errors import ConfigError, DataError

FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # kind: (required, optional)
    "qa": (("question", "answer"), ("paraphrased_question", "paraphrased_answer", "perturbed_answers", "options")),
    "mcq": (("question", "choices", "answer_index"), ("subject",)),
    "text": (("text",), ()),
}


def parse_mapping(spec: str | None) -> dict[str, str]:
    """``"question=prompt,answer=target"`` -> ``{"question": "prompt", "answer": "target"}`` ("" or None -> {})."""
    if not spec or not spec.strip():
        return {}
    out: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ConfigError(f"bad field mapping {part.strip()!r} in {spec!r}: expected schema_field=file_field")
        if key in out:
            raise ConfigError(f"field mapping {spec!r} maps {key!r} twice")
        out[key] = value
    return out


def load_jsonl(path: str | os.PathLike, kind: str = "qa", mapping: dict[str, str] | str | None = None,
               split: str | None = None) -> list[QAExample] | list[MCQExample] | list[TextExample]:
    """Read ``path`` (one JSON object per line) as ``kind`` = qa, mcq or text examples.

    ``mapping`` may be a dict or a :func:`parse_mapping` string. ``split`` defaults to the file stem.
    MCQ ``choices`` may be a list of strings or an object keyed A, B, C, ...; ``answer_index`` may be
    an integer index, a letter, or the exact text of one choice.
    """
    if kind not in FIELDS:
        raise ConfigError(f"unknown example kind {kind!r} (valid: {', '.join(FIELDS)})")
    mapping = parse_mapping(mapping) if isinstance(mapping, str) or mapping is None else dict(mapping)
    required, optional = FIELDS[kind]
    unknown = [k for k in mapping if k not in required + optional]
    if unknown:
        raise ConfigError(f"field mapping names unknown {kind} field(s) {', '.join(map(repr, unknown))} "
                          f"(valid: {', '.join(required + optional)})")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    split = split or path.stem
    src = {f: mapping.get(f, f) for f in required + optional}
    must = set(required) | set(mapping)
    out = []
    for where, rec in _io.iter_jsonl(path, path.name):
        vals: dict[str, Any] = {}
        for f, key in src.items():
            if key in rec and rec[key] is not None:
                vals[f] = rec[key]
            elif f in must:
                raise DataError(f"{where}: missing field {key!r}" + (f" (mapped to {f!r})" if key != f else ""))
        used = {src[f] for f in vals}
        meta = {k: v for k, v in rec.items() if k not in used}
        out.append(_build(kind, vals, src, where, split, meta))
    if not out:
        raise DataError(f"{path.name}: no records")
    return out


def _build(kind: str, v: dict, src: dict, where: str, split: str, meta: dict):
    s = {f: _io.as_str(v[f], src[f], where) for f in ("question", "answer", "text", "subject",
                                                       "paraphrased_question", "paraphrased_answer") if f in v}
    if kind == "text":
        return TextExample(s["text"], split, meta)
    if kind == "qa":
        lists = {f: _io.as_str_list(v[f], src[f], where) for f in ("perturbed_answers", "options") if f in v}
        return QAExample(s["question"], s["answer"], split, s.get("paraphrased_question"), s.get("paraphrased_answer"),
                         lists.get("perturbed_answers"), lists.get("options"), meta)
    choices = _choices(v["choices"], src["choices"], where)
    return MCQExample(s["question"], choices, _answer_index(v["answer_index"], choices, src["answer_index"], where),
                      split, s.get("subject"), meta)


def _choices(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, dict):
        keys = list(value)
        expected = list(_io.LETTERS[: len(keys)])
        if sorted(keys) != expected:
            raise DataError(f"{where}: field {key!r} is an object whose keys {keys} are not A, B, C, ...")
        value = [value[k] for k in expected]
    return _io.as_str_list(value, key, where, min_len=2)


def _answer_index(value: Any, choices: list[str], key: str, where: str) -> int:
    if isinstance(value, str) and not (len(value) == 1 and value.upper() in _io.LETTERS):
        hits = [i for i, c in enumerate(choices) if c == value]
        if len(hits) != 1:
            raise DataError(f"{where}: field {key!r} = {value!r} is not an index, a letter, or exactly one choice")
        return hits[0]
    return _io.as_index(value, len(choices), key, where, letters=True)
