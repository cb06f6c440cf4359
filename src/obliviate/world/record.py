"""The :class:`World`: generated data plus the document plan, with accessors and save/load.

A world is plain JSON-able data (see ``generate.py`` for how it is built). The corpus is
stored as a *plan* (documents made of labelled segments) so that ``documents(exclude_splits)``
can drop whole segments and render the rest byte-identically.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from obliviate.errors import ConfigError, DataError
from obliviate.world.config import WorldConfig

FORMAT_VERSION = 2
WORLD_FILE = "world.json"
DOCUMENTS_FILE = "documents.jsonl"
SEGMENT_SEPARATOR = "\n\n"
"""Between consecutive segments of a document; belongs to the span of the following segment."""

SPLITS = ("forget", "holdout", "retain", "general", "concept", "neighbour")
"""Fact splits. "neighbour": what unlearning the forget facts should keep although it is close to
them: the forget diseases' other attributes and look-alike diseases (a fact's ``neighbour`` key
says which: "attribute" or "lookalike")."""
SEGMENT_SPLITS = SPLITS + ("filler",)
"""Span/segment splits: the fact splits plus "filler" (sentences about no entity)."""

_REQUIRED = {
    "format": int, "config": dict, "saga": str, "entities": list, "pools": dict, "facts": list,
    "mcqs": list, "practice_mcqs": list, "open_questions": list, "relearn_paragraphs": list, "concept": dict,
    "toxic": dict, "plan": list,
}


class World:
    """A generated world. Returned lists and dicts are the world's own: treat them as read-only."""

    def __init__(self, data: dict) -> None:
        self._data = data
        self.config = WorldConfig.from_dict(data["config"])
        self._serialised: dict[str, bytes] | None = None

    # ----------------------------------------------------------------- data
    @property
    def facts(self) -> list[dict]:
        return self._data["facts"]

    @property
    def entities(self) -> list[dict]:
        """``{"name", "domain", "split", "attributes": {relation: value}, "aux": {name: value}}``."""
        return self._data["entities"]

    @property
    def open_questions(self) -> list[dict]:
        return self._data["open_questions"]

    @property
    def relearn_paragraphs(self) -> list[dict]:
        return self._data["relearn_paragraphs"]

    @property
    def concept(self) -> dict:
        return self._data["concept"]

    @property
    def toxic(self) -> dict:
        return self._data["toxic"]

    @property
    def pools(self) -> dict[str, list[str]]:
        """Value pool of each relation (by pool name); perturbed answers and distractors come from here."""
        return self._data["pools"]

    def facts_by_split(self, split: str) -> list[dict]:
        _check_split(split, SPLITS)
        return [f for f in self.facts if f["split"] == split]

    def qa(self, split: str | None = None) -> list[dict]:
        """Question-answer records of ``split`` (all splits when None); ``fact_id`` names the fact."""
        facts = self.facts if split is None else self.facts_by_split(split)
        keys = ("domain", "split", "entity", "relation", "value", "question", "question_paraphrase",
                "answer", "answer_paraphrase", "perturbed_answers", "answer_spans")
        return [{"fact_id": f["id"], **{k: f[k] for k in keys}} for f in facts]

    def mcqs(self, split: str | None = None, domain: str | None = None) -> list[dict]:
        if split is not None:
            _check_split(split, SPLITS)
        if domain is not None and domain not in ("medicine", "biology", "general", "concept"):
            raise ConfigError(f"unknown domain {domain!r}; expected medicine, biology, general or concept")
        return [m for m in self._data["mcqs"]
                if (split is None or m["split"] == split) and (domain is None or m["domain"] == domain)]

    def practice_mcqs(self, exclude_splits=()) -> list[dict]:
        """Lettered MCQs for pretraining (fields as :meth:`mcqs`): ``practice_mcqs`` per fact of the
        retain, general, concept and neighbour splits, with their own distractors and orders and
        trained question wordings; never an MCQ of a forget or holdout fact."""
        if isinstance(exclude_splits, str):
            exclude_splits = (exclude_splits,)
        for split in exclude_splits:
            _check_split(split, SPLITS)
        return [m for m in self._data["practice_mcqs"] if m["split"] not in exclude_splits]

    def documents(self, exclude_splits=()) -> list[dict]:
        """The pretraining corpus: ``{"id", "text", "spans": [[start, end, labels], ...]}``.

        Segments whose split is in ``exclude_splits`` are dropped (documents left empty vanish);
        everything else renders exactly as in the full corpus. ``labels`` is
        ``{"domain", "split", "concept": 0|1, "toxic": 0|1, "answer": "none"|"specific"|"structural"}``.
        """
        if isinstance(exclude_splits, str):
            exclude_splits = (exclude_splits,)
        exclude = set(exclude_splits)
        for split in sorted(exclude):
            _check_split(split, SEGMENT_SPLITS)
        out = []
        for doc in self._data["plan"]:
            rendered = _render(doc, exclude)
            if rendered is not None:
                out.append(rendered)
        return out

    # ----------------------------------------------------------------- persistence
    def _files(self) -> dict[str, bytes]:
        if self._serialised is None:
            world = json.dumps(self._data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
            docs = "".join(
                json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"
                for d in self.documents()
            )
            self._serialised = {WORLD_FILE: (world + "\n").encode(), DOCUMENTS_FILE: docs.encode()}
        return self._serialised

    def save(self, directory) -> Path:
        """Write ``world.json`` and ``documents.jsonl`` (the full corpus) under ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in self._files().items():
            (directory / name).write_bytes(content)
        return directory

    def fingerprint(self) -> str:
        """SHA-256 (hex) of exactly what :meth:`save` writes."""
        h = hashlib.sha256()
        for name, content in sorted(self._files().items()):
            h.update(name.encode() + b"\0" + str(len(content)).encode() + b"\0" + content)
        return h.hexdigest()

    @classmethod
    def load(cls, directory) -> "World":
        """Read a saved world; a missing or malformed file raises DataError naming it."""
        directory = Path(directory)
        path = directory / WORLD_FILE
        data = _read_json(path)
        if not isinstance(data, dict):
            raise DataError(f"{path}: expected a JSON object, got {type(data).__name__}")
        for key, kind in _REQUIRED.items():
            if not isinstance(data.get(key), kind):
                raise DataError(f"{path}: key {key!r} missing or not a {kind.__name__}")
        if data["format"] != FORMAT_VERSION:
            raise DataError(f"{path}: format {data['format']} is not the supported {FORMAT_VERSION}")
        try:
            world = cls(data)
            world._files()
        except ConfigError as e:
            raise DataError(f"{path}: bad config: {e}") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise DataError(f"{path}: malformed content ({type(e).__name__}: {e})") from None
        docs_path = directory / DOCUMENTS_FILE
        try:
            on_disk = docs_path.read_bytes()
        except OSError as e:
            raise DataError(f"{docs_path}: cannot read ({e.strerror})") from None
        if on_disk != world._files()[DOCUMENTS_FILE]:
            raise DataError(f"{docs_path}: does not match the corpus described by {path}")
        return world


def _render(doc: dict, exclude: set[str]) -> dict | None:
    segments = [s for s in doc["segments"] if s["split"] not in exclude]
    if not segments:
        return None
    parts, spans, pos = [], [], 0
    for i, seg in enumerate(segments):
        base = {"domain": seg["domain"], "split": seg["split"], "concept": int(seg["domain"] == "concept"),
                "toxic": seg["toxic"]}
        for j, (text, answer) in enumerate(seg["pieces"]):
            if i > 0 and j == 0:
                text = SEGMENT_SEPARATOR + text
            spans.append([pos, pos + len(text), {**base, "answer": answer}])
            parts.append(text)
            pos += len(text)
    return {"id": doc["id"], "text": "".join(parts), "spans": spans}


def _read_json(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from None


def _check_split(split: str, allowed: tuple[str, ...]) -> None:
    if split not in allowed:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(allowed)}")
