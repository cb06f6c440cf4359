"""Four-choice MCQ benchmarks: WMDP, MMLU, MedMCQA -> :class:`MCQExample`, from their local files or the hub.
The local layouts (see the data MANIFEST): docs/benchmarks.md.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records
from obliviate.tasks.sources.schema import MCQExample
from obliviate.errors import DataError
from obliviate.utils import note_input

WMDP_SUBSETS = ("bio", "chem", "cyber")
MMLU_SPLITS = ("test", "dev")
MMLU_HEADER = ["question", "choice0", "choice1", "choice2", "choice3", "answer"]
MEDMCQA_HUB = ("train", "validation")
WMDP_HUB_ID, MMLU_HUB_ID, MEDMCQA_HUB_ID = "cais/wmdp", "cais/mmlu", "openlifescienceai/medmcqa"


# ------------------------------------------------------------------ WMDP

def load_wmdp(subset: str, root: str | os.PathLike | None = None,
              allow_hub: bool = False) -> list[MCQExample]:
    """WMDP questions of ``subset`` (bio, chem or cyber); ``split`` = ``"wmdp_<subset>"``."""
    if subset not in WMDP_SUBSETS:
        raise DataError(f"unknown WMDP subset {subset!r} (valid: {', '.join(WMDP_SUBSETS)})")
    base = _io.root_dir(root)
    path = base / "wmdp" / f"{subset}_questions.json"
    if path.is_file():
        name = _io.display(path, base)
        data = _io.read_json(path, name)
        if not isinstance(data, list):
            raise DataError(f"{name}: expected a JSON list of questions, got {type(data).__name__}")
        records = ((f"{name} record {i}", rec) for i, rec in enumerate(data, 1))
    elif allow_hub:
        records = hub_records(WMDP_HUB_ID, f"wmdp-{subset}", "test", str(path))
    else:
        raise _io.missing_file(path, f"WMDP {subset}", WMDP_HUB_ID)
    out = []
    for where, rec in records:
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        choices = _io.req_str_list(rec, "choices", where, n=4)
        out.append(MCQExample(
            question=_io.req_str(rec, "question", where),
            choices=choices,
            answer_index=_io.as_index(_io.get(rec, "answer", where), len(choices), "answer", where),
            split=f"wmdp_{subset}",
            subject=subset,
        ))
    return out


# ------------------------------------------------------------------ MMLU

def list_mmlu_subjects(split: str = "test", root: str | os.PathLike | None = None) -> list[str]:
    """Subjects with a file in ``mmlu/<split>/``, sorted."""
    d = _mmlu_dir(split, root)
    if not d.is_dir():
        raise _io.missing_file(d, f"MMLU {split} directory", MMLU_HUB_ID)
    suffix = f"_{split}.csv"
    return sorted(p.name[: -len(suffix)] for p in d.iterdir() if p.name.endswith(suffix))


def load_mmlu(subject: str | list[str] | None = None, split: str = "test",
              root: str | os.PathLike | None = None,
              allow_hub: bool = False) -> list[MCQExample]:
    """MMLU questions of one subject, a list of subjects, or all (``None``); ``split`` is test or dev."""
    if split not in MMLU_SPLITS:
        raise DataError(f"unknown MMLU split {split!r} (valid: {', '.join(MMLU_SPLITS)})")
    base = _io.root_dir(root)
    d = _mmlu_dir(split, root)
    if not d.is_dir():
        if allow_hub:
            return _mmlu_hub(subject, split, str(d))
        raise _io.missing_file(d, f"MMLU {split} directory", MMLU_HUB_ID)
    available = list_mmlu_subjects(split, root)
    if subject is None:
        subjects = available
    else:
        subjects = [subject] if isinstance(subject, str) else list(subject)
        unknown = [s for s in subjects if s not in available]
        if unknown:
            raise DataError(f"unknown MMLU subject(s) {', '.join(map(repr, unknown))} in {d} "
                            f"(available: {', '.join(available)})")
    out: list[MCQExample] = []
    for s in subjects:
        path = d / f"{s}_{split}.csv"
        out.extend(_read_mmlu_csv(path, _io.display(path, base), s, split))
    return out


def _mmlu_dir(split: str, root) -> Path:
    return _io.root_dir(root) / "mmlu" / split


def _read_mmlu_csv(path: Path, name: str, subject: str, split: str) -> list[MCQExample]:
    out = []
    note_input(path)  # recorded with its SHA-256 for the run's results and cards
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        end = 0  # physical line on which the previous record ended
        for i, row in enumerate(reader):
            start, end = end + 1, reader.line_num
            where = f"{name} line {start}"
            if i == 0 and row == MMLU_HEADER:
                continue
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != 6:
                raise DataError(f"{where}: {len(row)} columns, expected 6 (question, 4 choices, answer)")
            ans = row[5].strip()
            if ans in ("0", "1", "2", "3"):
                idx = int(ans)
            elif ans in ("A", "B", "C", "D"):
                idx = "ABCD".index(ans)
            else:
                raise DataError(f"{where}: answer {row[5]!r} is neither an index 0-3 nor a letter A-D")
            out.append(MCQExample(question=row[0], choices=row[1:5], answer_index=idx, split=f"mmlu_{split}",
                                  subject=subject))
    if not out:
        raise DataError(f"{name}: no questions")
    return out


def _mmlu_hub(subject, split: str, missing: str) -> list[MCQExample]:
    subjects = ["all"] if subject is None else ([subject] if isinstance(subject, str) else list(subject))
    out = []
    for s in subjects:
        for where, rec in hub_records(MMLU_HUB_ID, s, split, missing):
            choices = _io.req_str_list(rec, "choices", where, n=4)
            out.append(MCQExample(
                question=_io.req_str(rec, "question", where), choices=choices,
                answer_index=_io.as_index(_io.get(rec, "answer", where), 4, "answer", where),
                split=f"mmlu_{split}", subject=rec.get("subject") or s,
            ))
    return out


# ------------------------------------------------------------------ MedMCQA

def load_medmcqa(name: str = "test", root: str | os.PathLike | None = None,
                 allow_hub: bool = False) -> list[MCQExample]:
    """MedMCQA questions from ``medmcqa/<name>.jsonl`` (test: 2816, sampled_50: 50).

    With ``allow_hub=True``, ``name`` may also be ``train`` or ``validation`` (the hub's own splits).
    """
    base = _io.root_dir(root)
    path = base / "medmcqa" / f"{name}.jsonl"
    if path.is_file():
        return [_medmcqa_local(rec, where, name) for where,
                rec in _io.iter_jsonl(path, _io.display(path, base))]
    if allow_hub and name in MEDMCQA_HUB:
        return [_medmcqa_hub(rec, where, name) for where, rec in
                hub_records(MEDMCQA_HUB_ID, None, name, str(path))]
    if allow_hub:
        raise DataError(f"{path} not found; MedMCQA subset {name!r} has no hub equivalent "
                        f"(hub splits: {', '.join(MEDMCQA_HUB)})")
    raise _io.missing_file(path, "MedMCQA "
                                 f"{name!r}", f"{MEDMCQA_HUB_ID} (its {' and '.join(MEDMCQA_HUB)} splits)")


def _medmcqa_local(rec: dict, where: str, name: str) -> MCQExample:
    opts = _io.get(rec, "options", where)
    if not isinstance(opts, dict) or sorted(opts) != ["A", "B", "C", "D"]:
        keys = sorted(opts) if isinstance(opts, dict) else type(opts).__name__
        raise DataError(f"{where}: field 'options' must map exactly A, B, C, D to choices, got {keys}")
    choices = [_io.as_str(opts[k], f"options.{k}", where) for k in "ABCD"]
    idx = _io.as_index(_io.get(rec, "answer_idx", where), 4, "answer_idx", where, letters=True)
    answer = _io.opt_str(rec, "answer", where)
    if answer is not None and answer.strip() != choices[idx].strip():
        raise DataError(f"{where}: answer {answer!r} does not match option {'ABCD'[idx]} ({choices[idx]!r})")
    meta = {"id": rec["realidx"]} if "realidx" in rec else {}
    return MCQExample(question=_io.req_str(rec, "question", where), choices=choices, answer_index=idx,
                      split=f"medmcqa_{name}", meta=meta)


def _medmcqa_hub(rec: dict, where: str, name: str) -> MCQExample:
    choices = [_io.req_str(rec, k, where) for k in ("opa", "opb", "opc", "opd")]
    return MCQExample(question=_io.req_str(rec, "question", where), choices=choices,
                      answer_index=_io.as_index(_io.get(rec, "cop", where), 4, "cop", where),
                      split=f"medmcqa_{name}", subject=rec.get("subject_name"), meta={"id": rec.get("id")})
