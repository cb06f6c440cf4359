"""TOFU (Maini et al. 2024): fictitious-author QA for unlearning.

Files under ``<data>/tofu/`` are JSON Lines, one ``{question, answer}`` per line;
``*_perturbed`` files add ``paraphrased_question``, ``paraphrased_answer`` and
``perturbed_answer`` (a list of wrong answers); for real_authors / world_facts
the perturbed files have ``perturbed_answer`` but no paraphrase, and the plain
files have ``option1``..``option4`` (the answer is one of them).
Hub fallback: ``locuslab/TOFU``, config = split name.
"""

from __future__ import annotations

import os

from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records
from obliviate.tasks.sources.schema import QAExample
from obliviate.errors import DataError

TOFU_SPLITS: tuple[str, ...] = (
    "full",
    "forget01", "forget05", "forget10", "forget20", "forget30", "forget50", "forget90",
    "forget01_perturbed", "forget05_perturbed", "forget10_perturbed",
    "retain10", "retain50", "retain70", "retain80", "retain90", "retain95", "retain99",
    "retain_perturbed",
    "real_authors", "real_authors_perturbed",
    "world_facts", "world_facts_perturbed",
)
"""Every TOFU file name (without ``.json``)."""

TOFU_HUB_ID = "locuslab/TOFU"


def load_tofu(split: str, root: str | os.PathLike | None = None, allow_hub: bool = False) -> list[QAExample]:
    """The records of ``tofu/<split>.json`` as :class:`QAExample` (``split`` is one of :data:`TOFU_SPLITS`)."""
    if split not in TOFU_SPLITS:
        raise DataError(f"unknown TOFU split {split!r} (valid: {', '.join(TOFU_SPLITS)})")
    base = _io.root_dir(root)
    path = base / "tofu" / f"{split}.json"
    if path.is_file():
        records = _io.iter_jsonl(path, _io.display(path, base))
    elif allow_hub:
        records = hub_records(TOFU_HUB_ID, split, "train", str(path))
    else:
        raise _io.missing_file(path, f"TOFU split {split!r}")
    out = [_parse(rec, where, split) for where, rec in records]
    if not out:
        raise DataError(f"{_io.display(path, base)}: no records")
    return out


def _parse(rec: dict, where: str, split: str) -> QAExample:
    ex = QAExample(question=_io.req_str(rec, "question", where), answer=_io.req_str(rec, "answer", where), split=split)
    if split.endswith("_perturbed"):
        ex.perturbed_answers = _io.req_str_list(rec, "perturbed_answer", where)
        if split.startswith(("forget", "retain")):
            ex.paraphrased_question = _io.req_str(rec, "paraphrased_question", where)
            ex.paraphrased_answer = _io.req_str(rec, "paraphrased_answer", where)
    elif split in ("real_authors", "world_facts"):
        ex.options = [_io.req_str(rec, f"option{i}", where) for i in range(1, 5)]
        if ex.options.count(ex.answer) != 1:
            raise DataError(f"{where}: answer {ex.answer!r} is not exactly one of option1..option4")
    return ex


def load_tofu_idk(root: str | os.PathLike | None = None) -> list[str]:
    """The refusal strings of ``tofu/idontknow.jsonl`` (plain text, one per line, blank lines skipped)."""
    base = _io.root_dir(root)
    path = _io.require_file(base / "tofu" / "idontknow.jsonl", "TOFU refusals")
    lines = [line.strip() for _, line in _io.read_lines(path)]
    if not lines:
        raise DataError(f"{_io.display(path, base)}: no refusal lines")
    return lines
