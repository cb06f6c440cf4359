"""``ember:<concept>``: concept erasure on EMBER's data (Suslik, Shafran, Geva 2026; seeds 000/003).

The concept's and the neutral sentences split 80/20 into forget / retain documents and held-out text,
the concept's MCQs (options reshuffled: :func:`load_ember`), similar-domain MCQs and open questions,
its relearning paragraphs and coherency prompts. Concept names: :func:`concept_slug`,
:data:`EMBER_SLUGS`. Sets and file layout: docs/benchmarks.md#the-tasks-data-files.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from obliviate.errors import ConfigError, DataError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.tasks.sources import _io
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample, _Record

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
        where = f"{n} record {i + 1}"
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
        where = f"{n} record {i + 1}"
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
            out.mc[c][s] = [_mc(rec, f"{n} [{c!r}][{s!r}] record {i + 1}", c, s, shuffle_options, i)
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
                where = f"{n} [{c!r}][{s!r}] record {i + 1}"
                rec = _as_dict(rec, where)
                qs.append(QAExample(_io.req_str(rec, "q", where), _io.req_str(rec, "a", where), s,
                                    meta={"concept": c}))
            out.open_questions[c][s] = qs

    # relearn paragraphs and coherence prompts
    n = name["relearn_paragraphs.json"]
    rp = _as_dict(raw["relearn_paragraphs.json"], n)
    for c in concepts:
        where = f"{n} [{c!r}]"
        out.relearn_paragraphs[c] = _io.req_str_list(_as_dict(_need(rp, c, n), where), "RelearnParagraphs",
                                                     where)
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
    return MCQExample(question=_io.req_str(rec, "q", where), choices=options,
                      answer_index=options.index(correct),
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


# ------------------------------------------------------------------ the task

EMBER_CONCEPTS: tuple[str, ...] = (
    "Culture of Greece", "Golf", "Republic of Ireland", "Ancient Rome", "Baseball", "Uranium", "Harry Potter",
    "Cannabis", "Gambling", "Gun", "Pornography", "COVID-19 pandemic", "Valentine's Day", "World War II",
    "Nazism", "Heroin", "Halloween", "Artificial intelligence",
)
"""The 18 concepts of the released data (ClarSu/EMBER-Embedding-Erasure ``data/mc_questions.json``)."""

TRAIN_FRACTION = 0.8


def concept_slug(name: str) -> str:
    """``"Valentine's Day"`` -> ``"valentines_day"``: lower case, apostrophes dropped, other runs of
    non-alphanumerics -> one underscore."""
    name = re.sub(r"['\u2019]", "", name.strip().lower())
    return re.sub(r"[^0-9a-z]+", "_", name).strip("_")


EMBER_SLUGS: tuple[str, ...] = tuple(concept_slug(c) for c in EMBER_CONCEPTS)


def resolve_concept(arg: str, concepts=EMBER_CONCEPTS) -> str:
    """The concept of ``concepts`` that ``arg`` names (any spelling :func:`concept_slug` equates)."""
    by_slug = {concept_slug(c): c for c in concepts}
    hit = by_slug.get(concept_slug(arg or ""))
    if hit is None:
        raise ConfigError(f"task 'ember:{arg}': unknown EMBER concept {arg!r}; valid: {', '.join(by_slug)}")
    return hit


def split_train_eval(items: list, seed: int, salt: int) -> tuple[list, list]:
    """A seeded 80/20 split of ``items``, each part in the original order."""
    perm = np.random.default_rng([seed, salt]).permutation(len(items))
    k = int(round(TRAIN_FRACTION * len(items)))
    return [items[i] for i in sorted(perm[:k])], [items[i] for i in sorted(perm[k:])]


@register_task("ember", help="EMBER concept erasure: ember:<concept>, e.g. ember:harry_potter",
               arguments=lambda: list(EMBER_SLUGS), needs_argument=True)
def ember_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0,
               allow_hub: bool = False,
               **_) -> Task:
    """The EMBER task of concept ``arg`` (see the module docstring); the data is local only."""
    have_file = (_io.root_dir(root) / "ember" / "mc_questions.json").is_file()
    concept = resolve_concept(arg, list_ember_concepts(root) if have_file else EMBER_CONCEPTS)
    data = load_ember(concept, root=root, shuffle_options=seed)

    forget_train, forget_eval = split_train_eval(data.concept_sentences[concept], seed, 1)
    neutral = [t.text for t in data.neutral_sentences]
    retain_train, retain_eval = split_train_eval(neutral, seed, 2)
    slug = concept_slug(concept)
    evals = [
        EvalSet("forget_mcq", "forget", "mcq", cut(data.mc[concept]["QA_test"], limit)),
        EvalSet("simdom_mcq", "neighbour", "mcq", cut(data.mc[concept]["SimdomQA_test"], limit)),
        EvalSet("forget_qa", "forget", "qa", cut(data.open_questions[concept]["QA_test"], limit)),
        EvalSet("forget_text", "forget", "text",
                [TextExample(s, "ember_concept_heldout",
                             {"concept": concept}) for s in cut(forget_eval, limit)]),
        EvalSet("retain_text", "retain", "text",
                [TextExample(s, "ember_neutral_heldout") for s in cut(retain_eval, limit)]),
    ]
    return Task(
        name=f"ember:{slug}",
        forget=Data(docs=cut(forget_train, limit)),
        retain=Data(docs=cut(retain_train, limit)),
        evals=evals,
        relearn=cut(data.relearn_paragraphs[concept], limit),
        prompt=PromptFormat(),
        meta={"concept": concept, "split_seed": seed, "train_fraction": TRAIN_FRACTION,
              "coherence_prompts": cut(data.coherence_prompts[concept], limit)},
    )
