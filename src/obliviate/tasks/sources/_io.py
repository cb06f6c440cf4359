"""Strict readers shared by the loaders.

Every problem raises :class:`DataError` whose message starts with *where* it is: ``"tofu/forget10.json line
17: missing field 'answer'"`` for JSON Lines and CSV, ``"wmdp/bio_questions.json record 3: ..."`` for a JSON
list; every line, record and row number is 1-based. A file that is not there raises :class:`MissingFile` (on
disk, or where the hub was allowed, on the hub too), so that a provider treats both absences alike where the
file is optional.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from obliviate.config import show
from obliviate.errors import DataError, setting
from obliviate.utils import data_dir, note_input

LETTERS = "ABCDEFGHIJ"


def root_dir(root: str | os.PathLike | None) -> Path:
    return Path(root) if root is not None else data_dir()


def display(path: Path, root: Path | None = None) -> str:
    """``path`` relative to ``root`` when it lies inside it (``tofu/forget10.json``), else as given."""
    if root is not None:
        try:
            return Path(path).relative_to(root).as_posix()
        except ValueError:
            pass
    return str(path)


class MissingFile(DataError):
    """A data file that is not there: not on disk, nor on the hub where the hub was allowed (``hub``: the
    hub's one-line reason, else None). ``path`` names the file looked for. A provider that can do without the
    file catches it, whichever of the two it was: ``--allow-hub`` never makes an optional file required."""

    def __init__(self, message: str, path: Path | str, hub: str | None = None):
        super().__init__(message)
        self.path, self.hub = Path(path), hub

    def looked_for(self, *also: Path) -> str:
        """``file not found: PATH`` (``, nor ALSO``: other files that would have done), with the hub's reason
        where the hub was asked too: the words of a missing-parts line."""
        return (f"file not found: {self.path}" + "".join(f", nor {p}" for p in also)
                + (f"; nor on the hub ({self.hub})" if self.hub else ""))


def data_hint(hub: str | None = None) -> str:
    """How to give a missing benchmark file, as the user gives settings (:func:`obliviate.errors.setting`):
    ``set $OBLIVIATE_DATA to the data directory, pass root=..., or allow_hub=True to read HUB`` from Python,
    ``set $OBLIVIATE_DATA to the data directory, or --allow-hub to read HUB`` on the command line; ``hub``
    names the hub release (None: the benchmark has none, and the hint leaves the hub out)."""
    ways = ["set $OBLIVIATE_DATA to the data directory"]
    root = setting("pass "
                   "root=...", None)  # the command line reads the data directory from $OBLIVIATE_DATA only
    ways += [root] if root else []
    ways += [f"{setting('allow_hub=True', '--allow-hub')} to read {hub}"] if hub else []
    return ", ".join(ways[:-1]) + (", or " if len(ways) > 1 else "") + ways[-1]


def missing_file(path: Path, what: str, hub: str | None = None) -> MissingFile:
    """The error of a missing file (:class:`MissingFile`), with :func:`data_hint` (``hub``: the release to
    read)."""
    return MissingFile(f"{what}: file not found: {path} ({data_hint(hub)})", path)


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise missing_file(path, what)
    return path


def iter_text_lines(path: Path, name: str) -> Iterator[tuple[int, str]]:
    """Every line of a UTF-8 file with its 1-based number, line ending kept (as ``\\n``).

    The file is read line by line (never whole); a leading byte-order mark is dropped. A line ends at
    ``\\n``, ``\\r\\n`` or a lone ``\\r`` (classic Mac files, some spreadsheet exports): all three end a
    line and count as one. Bytes that are not UTF-8 raise ``"<name> line <n>: not valid UTF-8 (...)"``.
    """
    n = 0
    note_input(path)  # recorded with its SHA-256 for the run's results and cards
    with open(path, "rb") as f:
        for raw in f:
            if n == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            for part in _split_cr(raw):
                n += 1
                try:
                    yield n, part.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{name} line {n}: not valid UTF-8 ({e.reason}, byte "
                                    f"0x{part[e.start]:02x} at column {e.start + 1})") from None


def _split_cr(raw: bytes) -> list[bytes]:
    """One ``\\n``-terminated chunk of a file as its lines, each ending in ``\\n``: ``\\r\\n`` and lone
    ``\\r`` become ``\\n`` (a ``\\r`` byte is never part of a UTF-8 multi-byte character)."""
    if b"\r" not in raw:
        return [raw]
    body = raw.replace(b"\r\n", b"\n")
    lines = body.split(b"\r")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook`` for :func:`json.loads`: a dict, or ``_DuplicateKey`` for a key given twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _duplicate_key_line(text: str, key: str) -> int | None:
    """1-based line where ``key`` is given a second time in one object of the JSON ``text`` (None if nowhere).

    Only called once a duplicate is known to exist, so its pure-Python walk costs nothing otherwise.
    """
    stack: list[set | None] = []  # the keys of each open object; None for an array
    expect_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            value, end = json.decoder.scanstring(text, i + 1)
            if expect_key and stack and stack[-1] is not None:
                if value == key and value in stack[-1]:
                    return text.count("\n", 0, i) + 1
                stack[-1].add(value)
            expect_key = False
            i = end
            continue
        if c == "{":
            stack.append(set())
            expect_key = True
        elif c == "[":
            stack.append(None)
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == ",":
            expect_key = bool(stack) and stack[-1] is not None
        i += 1
    return None


def parse_json(text: str, where: str, one_line: bool = False) -> Any:
    """``json.loads`` whose every failure is one DataError line starting with ``where``.

    ``one_line``: ``where`` already names the line (JSON Lines); otherwise the line of a syntax
    error is appended to ``where``. Nesting too deep for the parser and integers
    too long to convert are refused, not left to raise RecursionError / ValueError, and so is
    a key given twice in one object (``json.loads`` would keep the last value without a word).
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        line = None if one_line else _duplicate_key_line(text, e.key)
        at = f"{where} line {line}" if line is not None else where
        key = repr(e.key) if len(repr(e.key)) <= 80 else repr(e.key)[:80] + "..."
        raise DataError(f"{at}: duplicate key {key} in one JSON object") from None
    except json.JSONDecodeError as e:
        at = where if one_line else f"{where} line {e.lineno}"
        raise DataError(f"{at}: invalid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise DataError(f"{where}: invalid JSON (nested too deeply)") from None
    except ValueError as e:  # int("1" * 5000): CPython's limit on integer digits
        raise DataError(f"{where}: invalid JSON (a number too large: {str(e).split(':')[0]})") from None


def iter_jsonl(path: Path, name: str) -> Iterator[tuple[str, dict]]:
    """Yield ``(where, record)`` for each non-blank line; ``where`` is ``"<name> line <n>"`` (1-based)."""
    for n, line in iter_text_lines(path, name):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        rec = parse_json(line, where, one_line=True)
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        yield where, rec


def read_text(path: Path, name: str) -> str:
    """The whole file as UTF-8 text (leading byte-order mark dropped); bad bytes name their line."""
    note_input(path)
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"{name} line {line}: not valid UTF-8 ({e.reason}, "
                        f"byte 0x{raw[e.start]:02x} at column {col})") from None


def read_json(path: Path, name: str) -> Any:
    return parse_json(read_text(path, name), name)


def json_list_records(path: Path, base: Path | None = None) -> list[tuple[str, dict]]:
    """``(where, record)`` of each object of a file holding one JSON list of records (``where``: ``"<name>
    record <i>"``, 1-based as lines are, ``name`` relative to ``base``)."""
    name = display(path, base)
    data = read_json(path, name)
    if not isinstance(data, list):
        raise DataError(f"{name}: expected a JSON list of records, got {type(data).__name__}")
    out = []
    for i, rec in enumerate(data, 1):
        where = f"{name} record {i}"
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        out.append((where, rec))
    return out


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines of a text file with their 1-based line numbers, line ending removed."""
    note_input(path)
    with open(path, encoding="utf-8", newline="") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield n, line


# ------------------------------------------------------------------ field checks

def get(rec: dict, key: str, where: str) -> Any:
    if key not in rec:
        raise DataError(f"{where}: missing field {key!r}")
    return rec[key]


def as_str(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return unicode_text(value, key, where)


def unicode_text(value: str, key: str, where: str) -> str:
    """``value`` if it is valid Unicode text; a lone surrogate (JSON ``"\\ud800"`` without its pair, which
    no tokenizer can encode) is refused, naming the field and the character's position."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataError(f"{where}: field {key!r} holds a lone surrogate \\u{ord(value[e.start]):04x} at "
                        f"character {e.start + 1} (half of a UTF-16 pair, e.g. a JSON escape without its "
                        "other half); not valid Unicode text") from None
    return value


def req_str(rec: dict, key: str, where: str) -> str:
    return as_str(get(rec, key, where), key, where)


def opt_str(rec: dict, key: str, where: str) -> str | None:
    return None if rec.get(key) is None else as_str(rec[key], key, where)


def as_str_list(value: Any, key: str, where: str, n: int | None = None, min_len: int = 1) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}: field {key!r} must be a list of strings")
    for v in value:
        unicode_text(v, key, where)
    if n is not None and len(value) != n:
        raise DataError(f"{where}: field {key!r} has {len(value)} entries, expected {n}")
    if len(value) < min_len:
        raise DataError(f"{where}: field {key!r} has {len(value)} entries, expected at least {min_len}")
    return list(value)


def req_str_list(rec: dict, key: str, where: str, n: int | None = None, min_len: int = 1) -> list[str]:
    return as_str_list(get(rec, key, where), key, where, n, min_len)


def as_index(value: Any, n_choices: int, key: str, where: str, letters: bool = False) -> int:
    """A 0-based answer index: an int in ``[0, n_choices)``, or (``letters=True``) a letter A, B, ...

    Anything else (a bool, a float, a digit string, an out-of-range value) is rejected.
    """
    if letters and isinstance(value, str) and len(value) == 1 and value.upper() in LETTERS:
        idx = LETTERS.index(value.upper())
    elif isinstance(value, int) and not isinstance(value, bool):
        idx = value
    else:
        kinds = "an integer index or a letter" if letters else "an integer index"
        raise DataError(f"{where}: field {key!r} = {show(value)} must be {kinds}")
    if not 0 <= idx < n_choices:
        raise DataError(f"{where}: field {key!r} = {show(value)} is out of range for {n_choices} choices")
    return idx
