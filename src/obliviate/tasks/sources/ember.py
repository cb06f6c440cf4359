"""EMBER concept-erasure data (seeds 000/003; ClarSu/EMBER-Embedding-Erasure ``data/``).

Files under ``<data>/ember/`` (18 concepts):

- ``concept_sentences.json``: a list of ``{concept, sentences[300]}``;
- ``neutral_sentences.json``: a list of 300 ``{url, title, sentence}``;
- ``mc_questions.json``: concept -> {QA_train, QA_test, SimdomQA_train, SimdomQA_test} -> list of
  ``{q, correct_answer, options[4]}``;
- ``open_questions.json``: the same four splits of ``{q, a}``;
- ``relearn_paragraphs.json``: concept -> ``{RelearnParagraphs: [...]}``;
- ``coherency_prompts.json``: concept -> list of prompts.

Note: in the released MC questions the correct option is first in ~89% of questions;
pass ``shuffle_options=<seed>`` to permute each question's options deterministically.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.tasks.sources import _io
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample, _Record
from obliviate.errors import DataError

EMBER_SPLITS = ("QA_train", "QA_test", "SimdomQA_train", "SimdomQA_test")
_FILES = ("concept_sentences.json", "neutral_sentences.json", "mc_questions.json", "open_questions.json",
          "relearn_paragraphs.json", "coherency_prompts.json")


@dataclass
class EmberData(_Record):
    """EMBER data, every per-concept field keyed by concept name (only the loaded concepts)."""

    concepts: list[str]
    concept_sentences: dict[str, list[str]] = field(default_factory=dict)
    neutral_sentences: list[TextExample] = field(default_factory=list)
    mc: dict[str, dict[str, list[MCQExample]]] = field(default_factory=dict)
    """concept -> split (:data:`EMBER_SPLITS`) -> questions."""
    open_questions: dict[str, dict[str, list[QAExample]]] = field(default_factory=dict)
    relearn_paragraphs: dict[str, list[str]] = field(default_factory=dict)
    coherence_prompts: dict[str, list[str]] = field(default_factory=dict)


def _ember_dir(root) -> tuple[Path, Path]:
    base = _io.root_dir(root)
    return base, base / "ember"


def list_ember_concepts(root: str | os.PathLike | None = None) -> list[str]:
    """Concept names in the order of ``mc_questions.json``."""
    base, d = _ember_dir(root)
    path = _io.require_file(d / "mc_questions.json", "EMBER MC questions")
    data = _io.read_json(path, _io.display(path, base))
    if not isinstance(data, dict):
        raise DataError(f"{_io.display(path, base)}: expected an object keyed by concept")
    return list(data)


def load_ember(concept: str | list[str] | None = None, root: str | os.PathLike | None = None,
               shuffle_options: int | None = None) -> EmberData:
    """All EMBER files for one concept, a list of concepts, or all 18 (``None``).

    Each file must cover every requested concept. ``shuffle_options`` (a seed) permutes the
    options of each MC question (``answer_index`` follows); ``None`` keeps the file order.
    """
    base, d = _ember_dir(root)
    for f in _FILES:
        _io.require_file(d / f, f"EMBER {f}")
    name = {f: _io.display(d / f, base) for f in _FILES}
    raw = {f: _io.read_json(d / f, name[f]) for f in _FILES}

    mc_raw = _as_dict(raw["mc_questions.json"], name["mc_questions.json"])
    all_concepts = list(mc_raw)
    if concept is None:
        concepts = all_concepts
    else:
        concepts = [concept] if isinstance(concept, str) else list(concept)
        unknown = [c for c in concepts if c not in mc_raw]
        if unknown:
            raise DataError(f"unknown EMBER concept(s) {', '.join(map(repr, unknown))} "
                            f"(available: {', '.join(all_concepts)})")
    out = EmberData(concepts=concepts)

    # concept sentences: a list of {concept, sentences}
    n = name["concept_sentences.json"]
    cs = raw["concept_sentences.json"]
    if not isinstance(cs, list):
        raise DataError(f"{n}: expected a JSON list of {{concept, sentences}}")
    by_concept = {}
    for i, rec in enumerate(cs):
        where = f"{n} record {i}"
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object")
        by_concept[_io.req_str(rec, "concept", where)] = _io.req_str_list(rec, "sentences", where)
    out.concept_sentences = {c: _need(by_concept, c, n) for c in concepts}

    # neutral sentences: a list of {url, title, sentence}
    n = name["neutral_sentences.json"]
    ns = raw["neutral_sentences.json"]
    if not isinstance(ns, list):
        raise DataError(f"{n}: expected a JSON list of {{url, title, sentence}}")
    for i, rec in enumerate(ns):
        where = f"{n} record {i}"
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object")
        meta = {k: rec[k] for k in ("url", "title") if k in rec}
        out.neutral_sentences.append(TextExample(_io.req_str(rec, "sentence", where), "ember_neutral", meta))

    # MC questions
    n = name["mc_questions.json"]
    for c in concepts:
        out.mc[c] = {}
        splits = _as_dict(mc_raw[c], f"{n} [{c!r}]")
        for s in EMBER_SPLITS:
            rows = _need(splits, s, f"{n} [{c!r}]")
            out.mc[c][s] = [_mc(rec, f"{n} [{c!r}][{s!r}] record {i}", c, s, shuffle_options, i)
                            for i, rec in enumerate(_as_list(rows, f"{n} [{c!r}][{s!r}]"))]

    # open questions
    n = name["open_questions.json"]
    oq = _as_dict(raw["open_questions.json"], n)
    for c in concepts:
        splits = _as_dict(_need(oq, c, n), f"{n} [{c!r}]")
        out.open_questions[c] = {}
        for s in EMBER_SPLITS:
            rows = _as_list(_need(splits, s, f"{n} [{c!r}]"), f"{n} [{c!r}][{s!r}]")
            qs = []
            for i, rec in enumerate(rows):
                where = f"{n} [{c!r}][{s!r}] record {i}"
                rec = _as_dict(rec, where)
                qs.append(QAExample(_io.req_str(rec, "q", where), _io.req_str(rec, "a", where), s,
                                    meta={"concept": c}))
            out.open_questions[c][s] = qs

    # relearn paragraphs and coherence prompts
    n = name["relearn_paragraphs.json"]
    rp = _as_dict(raw["relearn_paragraphs.json"], n)
    for c in concepts:
        where = f"{n} [{c!r}]"
        out.relearn_paragraphs[c] = _io.req_str_list(_as_dict(_need(rp, c, n), where), "RelearnParagraphs", where)
    n = name["coherency_prompts.json"]
    cp = _as_dict(raw["coherency_prompts.json"], n)
    for c in concepts:
        out.coherence_prompts[c] = _io.as_str_list(_need(cp, c, n), repr(c), n)
    return out


def _mc(rec, where: str, concept: str, split: str, seed: int | None, i: int) -> MCQExample:
    rec = _as_dict(rec, where)
    options = _io.req_str_list(rec, "options", where, n=4)
    correct = _io.req_str(rec, "correct_answer", where)
    if options.count(correct) != 1:
        raise DataError(f"{where}: correct_answer {correct!r} is not exactly one of the options")
    if seed is not None:
        rng = random.Random(f"{seed}:{concept}:{split}:{i}")
        rng.shuffle(options)
    return MCQExample(question=_io.req_str(rec, "q", where), choices=options, answer_index=options.index(correct),
                      split=split, subject=concept)


def _as_dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _as_list(value, where: str) -> list:
    if not isinstance(value, list):
        raise DataError(f"{where}: expected a JSON list, got {type(value).__name__}")
    return value


def _need(mapping: dict, key: str, where: str):
    if key not in mapping:
        raise DataError(f"{where}: missing entry {key!r}")
    return mapping[key]
