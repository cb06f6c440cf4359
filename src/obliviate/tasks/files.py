"""``file:SPEC.yaml``: the user's own forget, retain, evaluation and relearning files.

A small YAML spec (paths relative to it) names the files by role; each is read by
:func:`obliviate.tasks.sources.generic.read_records`, its kind and the fields its mapping leaves out found by
the one detector every file goes through (:mod:`obliviate.tasks.sources.detect`). :func:`task_from_files`
builds the same task from ``--forget FILE --retain FILE ...``. The spec's keys: docs/tasks.md#your-own-files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

import numpy as np

from obliviate.tasks.sources.detect import EVAL_KINDS, TRAIN_KINDS, FieldsUnknown
from obliviate.tasks.sources.generic import parse_mapping, read_records
from obliviate.config import load_yaml
from obliviate.errors import ConfigError, DataError
from obliviate.config import Schema, validate
from obliviate.tasks import KINDS, ROLES, Data, EvalSet, PromptFormat, Task, register_task
from obliviate.tasks.base import PreferredAnswers, records_inputs

FILE_SETS = ("forget", "retain", "evals", "utility", "neighbour", "holdout", "relearn")
"""The keys of a task spec that list files."""


class FileEntry(Schema):
    """One file of a task spec (docs/tasks.md#your-own-files): a path, or a mapping with ``path``."""
    path: str = Field(min_length=1)
    kind: Literal[KINDS] | None = None
    mapping: Any = None
    """A ``"question=q,answer=a"`` string or a mapping of field names (checked by :func:`mapping_of`)."""
    split_by: Literal["line", "blank"] | None = None
    name: str | None = None
    role: Literal[ROLES] | None = None
    style: Literal["letters", "cloze"] | None = None
    group: str | None = None
    chosen: str | None = None


class PromptSpec(Schema):
    """The ``prompt`` of a task spec (a string is its ``template``): the fields of :class:`PromptFormat`."""
    template: str = PromptFormat.template
    answer_prefix: str = PromptFormat.answer_prefix
    chat: bool = False
    system: str | None = None


class TaskSpec(Schema):
    """A task spec file's top level; each file set is a list of :class:`FileEntry` (read one by one)."""
    name: str | None = None
    prompt: PromptSpec | None = None
    auto_evals: bool = True
    forget: list = []
    retain: list = []
    evals: list = []
    utility: list = []
    neighbour: list = []
    holdout: list = []
    relearn: list = []


ENTRY_KEYS = set(FileEntry.model_fields)
SPEC_KEYS = set(TaskSpec.model_fields)


def _entry(raw: Any, base: Path, where: str) -> dict:
    if isinstance(raw, (str, Path)):
        raw = {"path": str(raw)}
    if not isinstance(raw, dict) or "path" not in raw:
        raise ConfigError(f"{where}: expected a file path or a mapping with 'path', got {raw!r:.80}")
    if isinstance(raw["path"], Path):
        raw = {**raw, "path": str(raw["path"])}
    if not isinstance(raw["path"], str) or not raw["path"].strip():
        raise ConfigError(f"{where}: 'path' must be a file path, got {raw['path']!r:.80}")
    entry = validate(FileEntry, raw, f"{where}: {raw['path']}").model_dump(exclude_none=True)
    mapping_of(entry, f"{where}: {raw['path']}")
    path = Path(entry["path"]).expanduser()
    return {**entry, "path": path if path.is_absolute() else base / path}


def mapping_of(entry: dict, where: str) -> dict[str, str]:
    """The field mapping of a file entry: a ``"question=q,answer=a"`` string or a mapping of strings (none:
    {})."""
    m = entry.get("mapping")
    if m is None or isinstance(m, str):
        return parse_mapping(m)
    if isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
        return dict(m)
    raise ConfigError(f"{where}: 'mapping' must be a string such as 'question=q,answer=a' or a mapping of "
                      f"field names, got {m!r:.80}")


def read_entry(entry: dict, limit: int | None, kinds: tuple[str, ...] = EVAL_KINDS) -> tuple[str, list]:
    """(kind, records) of one file entry: its kind and the fields its mapping leaves out found by the one
    detector (:func:`~obliviate.tasks.sources.detect.detect`, trying ``kinds`` in order where the entry gives
    no kind)."""
    mapping = mapping_of(entry, str(entry["path"]))
    return read_records(entry["path"], kind=entry.get("kind"), mapping=mapping, limit=limit,
                        split_by=entry.get("split_by"), kinds=kinds)


def _group(rec, entry: dict) -> str | None:
    """The group of a forget QA record: its field ``entry["group"]`` (required where the entry names it), else
    its field ``group`` if it has one (the disjoint attacks keep a group whole: docs/tasks.md)."""
    field = entry.get("group") or "group"
    value = (rec.meta or {}).get(field)
    if value is None and entry.get("group"):
        raise DataError(f"{entry['path'].name}: a record has no group field {field!r} (entry key 'group')")
    return None if value is None else str(value)


def _chosen(rec, entry: dict) -> str | None:
    """The preferred answer of a forget QA record of preference data: its field ``entry["chosen"]`` (required
    where the entry names it), else its field ``chosen`` if it has one; the record's answer is then the
    rejected one."""
    field = entry.get("chosen") or "chosen"
    value = (rec.meta or {}).get(field)
    if value is None and entry.get("chosen"):
        raise DataError(f"{entry['path'].name}: a record has no "
                        f"chosen-answer field {field!r} (entry key 'chosen')")
    return None if value is None else str(value)


def _training(entries: list[dict], side: str, limit: int | None, groups: list | None = None,
              chosen: list | None = None) -> Data:
    """The QA pairs and texts of ``entries``; ``groups`` (a list) receives each QA pair's :func:`_group`,
    ``chosen`` its :func:`_chosen`."""
    data = Data()
    for e in entries:
        kind, recs = read_entry(e, limit, TRAIN_KINDS)
        if kind == "qa":
            data.qa += [(r.question, r.answer) for r in recs]
            if groups is not None:
                groups += [_group(r, e) for r in recs]
            if chosen is not None:
                chosen += [_chosen(r, e) for r in recs]
        elif kind == "text":
            data.docs += [r.text for r in recs]
        else:
            raise DataError(f"{e['path'].name}: MCQ records cannot be {side} training data (they are "
                            "evaluation sets: list the file under 'evals', or give QA pairs or texts)")
    return data


def _as_list(value: Any, key: str) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


RETAIN_HOLDOUT_SHARE = 0.2
"""The share of the retain file's QA pairs (and texts) :func:`task_from_files` holds out for the retain
evaluation when nothing else measures what must be kept (no ``--utility`` or ``--holdout`` files): a retain
score read only on the pairs the methods train on reads 1.000 whatever they did to the rest (issue #42)."""
RETAIN_HOLDOUT_SEED = 0
"""The seed of that split: the same files give the same held-out items in every run."""


def hold_out(items: list, share: float, seed: int = RETAIN_HOLDOUT_SEED) -> tuple[list, list]:
    """``(kept, held out)``: ``ceil(share * n)`` of ``items`` held out by a seeded permutation (each part in
    file order); nothing held out from fewer than 2 items (one would be left to train on, or none)."""
    n_out = min(len(items) - 1, math.ceil(share * len(items))) if len(items) >= 2 else 0
    out = set(np.random.default_rng(seed).permutation(len(items))[:n_out].tolist())
    return [x for i, x in enumerate(items) if i not in out], [x for i, x in enumerate(items) if i in out]


def _split_retain(retain: Data, share: float) -> tuple[Data, Data, str | None]:
    """The retain data to train on, the held-out part, and the line that says so (None when nothing is held
    out)."""
    qa, qa_out = hold_out(retain.qa, share)
    docs, docs_out = hold_out(retain.docs, share)
    held = Data(qa=qa_out, docs=docs_out)
    if not held:
        return retain, held, None
    parts = [f"{len(qa_out)} of {len(retain.qa)} QA pairs"] if qa_out else []
    parts += [f"{len(docs_out)} of {len(retain.docs)} texts"] if docs_out else []
    return Data(qa=qa, docs=docs), held, (
        f"retain: {' and '.join(parts)} of the retain files held out (a seeded {100 * share:.0f}% share, "
        f"seed {RETAIN_HOLDOUT_SEED}) as retain_heldout_*: no unlearning method's retain term trains on "
        "them; they make heldout_keep_score and are part of untrained_keep_score, which S-unlearning's R "
        "reads; retain_score stays on the pairs trained on. `obliviate finetune` (and compare's base model "
        "and oracle) does train on them, with the rest of the retain file, so that the model knows what the "
        "held-out score reads; give --utility or --holdout files to train on the whole retain file")


def read_spec(name: str, base: Path, spec: Any) -> tuple[TaskSpec, dict[str, list[dict]]]:
    """A spec mapping checked against its schema (:class:`TaskSpec`, each entry a :class:`FileEntry`), and its
    file entries by set (paths relative to ``base``); no data file is read."""
    if not isinstance(spec, dict):
        raise ConfigError(f"task spec {name!r} must be a mapping, got {spec!r:.80}")
    spec = {k: v for k, v in spec.items() if v is not None}
    if isinstance(spec.get("prompt"), str):
        spec["prompt"] = {"template": spec["prompt"]}
    checked = validate(TaskSpec, {k: (v if k not in FILE_SETS else _as_list(v, k)) for k, v in spec.items()},
                       f"task spec {name!r}")
    ent = {k: [_entry(r, base, f"task spec key '{k}'") for r in getattr(checked, k)] for k in FILE_SETS}
    if not ent["forget"]:
        raise ConfigError(f"task spec {name!r}: no forget files (key 'forget')")
    return checked, ent


def spec_files(path: str | Path) -> list[Path]:
    """The files the spec file ``path`` lists, after its schema is checked (:func:`read_spec`); no data is
    read."""
    path = Path(path).expanduser()
    spec = load_yaml(path)
    name = spec.get("name")
    _, ent = read_spec(name if isinstance(name, str) and name else path.stem, path.parent, spec)
    return [e["path"] for entries in ent.values() for e in entries]


def build_file_task(name: str, base: Path, spec: dict, limit: int | None = None,
                    retain_holdout: float = 0.0) -> Task:
    """The task of a spec mapping (see the module docstring); relative paths are under ``base``.

    ``retain_holdout``: the share of the retain data held out (:func:`hold_out`) where the spec has no utility
    or holdout files: the held-out items are the sets ``retain_heldout_qa`` / ``retain_heldout_text`` (retain
    role, ``variant``: no method trains on them, and they make ``heldout_keep_score``, part of the
    ``untrained_keep_score`` S-unlearning's R reads, as the world's held-out retain wordings do:
    :func:`obliviate.eval.suite.score_against`); ``retain_qa`` stays the retain pairs trained on
    (``retain_score``, ``s_unlearning_trained``). The base model and the oracle a comparison fine-tunes learn
    the held-out items with the rest (``meta["retain_heldout"]``,
    :func:`obliviate.train.finetune.training_data`); ``meta["notes"]`` says so."""
    checked, ent = read_spec(name, base, spec)
    prompt = PromptFormat(**checked.prompt.model_dump()) if checked.prompt else PromptFormat()
    groups: list = []
    chosen: list = []
    forget = _training(ent["forget"], "forget", limit, groups, chosen)
    if any(c is not None for c in chosen) and None in chosen:
        raise DataError(f"task spec {name!r}: {chosen.count(None)} of {len(chosen)} forget QA pairs have no "
                        "chosen answer: preference data needs one for every pair (or none at all)")
    retain = _training(ent["retain"], "retain", limit)
    notes: list[str] = []
    held = Data()
    if retain_holdout > 0 and not ent["utility"] and not ent["holdout"]:
        retain, held, note = _split_retain(retain, retain_holdout)
        notes += [note] if note else []
    evals: list[EvalSet] = []
    if checked.auto_evals:
        for side, data, variant in (("forget", forget, False), ("retain", retain, False),
                                    ("retain_heldout", held, True)):
            role = "retain" if variant else side
            if data.qa:
                evals.append(EvalSet(f"{side}_qa", role, "qa",
                                     [{"question": q, "answer": a} for q, a in data.qa],
                                     variant=variant))
            if data.docs:
                evals.append(EvalSet(f"{side}_text", role, "text", [{"text": t} for t in data.docs],
                                     variant=variant))
    for key in ("evals", "utility", "neighbour"):
        for e in ent[key]:
            role = e.get("role") or ("forget" if key == "evals" else key)
            if key != "evals" and e.get("role") not in (None, key):
                raise ConfigError(f"task spec key '{key}': {e['path'].name} has role {e['role']!r}")
            kind, recs = read_entry(e, limit)
            evals.append(EvalSet(e.get("name") or f"{role}_{e['path'].stem}", role, kind, recs,
                                 mcq_style=e.get("style") or "letters"))
    holdout = _training(ent["holdout"], "holdout", limit) if ent["holdout"] else None
    relearn: list[str] = []
    for e in ent["relearn"]:
        kind, recs = read_entry(e, limit, TRAIN_KINDS)
        if kind == "mcq":
            raise DataError(f"{e['path'].name}: a relearning corpus holds texts or QA pairs, not MCQs")
        relearn += [r.text if kind == "text" else f"{r.question} {r.answer}" for r in recs]
    return Task(name=name, forget=forget, retain=retain, evals=evals, relearn=relearn or None,
                holdout=holdout,
                prompt=prompt, groups=groups if groups and None not in groups else None,
                idk=PreferredAnswers(chosen) if chosen and None not in chosen else None,
                meta={"files": {k: [str(e["path"]) for e in v] for k, v in ent.items() if v},
                      **({"notes": notes, "retain_heldout": held} if held else {})})


@records_inputs
def task_from_files(forget: list[str], retain: list[str] | None = None, *, utility: list[str] | None = None,
                    holdout: list[str] | None = None, relearn: list[str] | None = None,
                    evals: list[str] | None = None,
                    mapping: str | dict | None = None, template: str | None = None, chat: bool = False,
                    limit: int | None = None, name: str = "files",
                    retain_holdout: float = RETAIN_HOLDOUT_SHARE) -> Task:
    """The ``--forget FILE --retain FILE ...`` shorthand: one spec built from paths.

    ``mapping``: a string (``"question=q,answer=a"``) applies to every file; a dict gives each file its own,
    keyed by the file's path or by its set (``{"forget": "answer=true_answer"}``; a path wins over a set), and
    files it does not name keep the fields they have. A path may also be a spec entry ``{path, mapping,
    ...}``.

    Without ``utility`` or ``holdout`` files, ``retain_holdout`` (:data:`RETAIN_HOLDOUT_SHARE`; 0: none) of
    the retain file is held out for the retain evaluation (:func:`build_file_task`), said in
    ``meta["notes"]``."""
    sets = {"forget": forget, "retain": retain, "utility": utility, "holdout": holdout, "relearn": relearn,
            "evals": evals}
    by_file: dict = {}
    if isinstance(mapping, dict):
        paths = {str(p) for v in sets.values() for p in v or [] if not isinstance(p, dict)}
        unknown = sorted(str(k) for k in mapping if not sets.get(str(k)) and str(k) not in paths)
        if unknown:
            raise ConfigError(f"mapping: {unknown[0]!r} is neither a set given "
                              f"({', '.join(k for k, v in sets.items() if v)}) nor one of the files given")
        by_file = {str(k): v for k, v in mapping.items()}
    elif mapping is not None and not isinstance(mapping, str):
        raise ConfigError("mapping: expected a string such as 'question=q,answer=a' or a dict of them per "
                          f"file or set, got {mapping!r:.80}")

    def entries(key, paths):
        out = []
        for p in paths or []:
            if isinstance(p, dict):
                out.append(p)
                continue
            m = by_file.get(str(p), by_file.get(key)) if by_file else mapping
            out.append({"path": p, **({"mapping": m} if m else {})})
        return out

    spec: dict = {k: entries(k, v) for k, v in sets.items() if v}
    if chat:
        spec["prompt"] = {"chat": True}
    elif template:
        spec["prompt"] = {"template": template}
    return build_file_task(name, Path.cwd(), spec, limit, retain_holdout=retain_holdout)


@register_task("file", help="your own files, described by a YAML spec: file:SPEC.yaml", needs_argument=True)
def file_task(arg: str | None, *, limit: int | None = None, **_) -> Task:
    path = Path(arg).expanduser()
    if not path.is_file():
        raise DataError(f"task spec not found: {path}")
    spec = load_yaml(path)
    name = spec.get("name")
    try:
        return build_file_task(name if isinstance(name, str) and name else path.stem, path.parent, spec,
                               limit)
    except FieldsUnknown as e:  # the hint in the spec's syntax: the entry's mapping
        raise DataError(f"task spec {path}: {e.hint('spec')}") from None
