"""``tofu:forget01|forget05|forget10``: TOFU's fictitious authors (Maini et al. 2024).

Forget = the forget split's QA pairs, retain = the matching retain split (derived from ``full`` where
its file is missing), TOFU's perturbed evaluation sets (``meta["perturbed"]`` for
:func:`obliviate.eval.tofu.tofu_eval`), optional holdout (``tofu/holdoutNN.json``, TOFU's hub release:
the membership-inference non-members) and IdK answers; :func:`load_tofu` reads the files. The task asks
for extraction strength and exact memorization (``meta["metrics"]``, :data:`obliviate.eval.metric.METRICS`).
Sets and file layout: docs/benchmarks.md#the-tasks-data-files.
"""

from __future__ import annotations

import os

from obliviate.errors import ConfigError, DataError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records, optional_hub_records
from obliviate.tasks.sources.schema import MCQExample, QAExample

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
    """The records of ``tofu/<split>.json`` as :class:`QAExample` (``split`` is one of
    :data:`TOFU_SPLITS`)."""
    if split not in TOFU_SPLITS:
        raise DataError(f"unknown TOFU split {split!r} (valid: {', '.join(TOFU_SPLITS)})")
    base = _io.root_dir(root)
    path = base / "tofu" / f"{split}.json"
    if path.is_file():
        records = _io.iter_jsonl(path, _io.display(path, base))
    elif allow_hub:
        records = hub_records(TOFU_HUB_ID, split, "train", str(path))
    else:
        raise _io.missing_file(path, f"TOFU split {split!r}", TOFU_HUB_ID)
    out = [_parse(rec, where, split) for where, rec in records]
    if not out:
        raise DataError(f"{_io.display(path, base)}: no records")
    return out


def _parse(rec: dict, where: str, split: str) -> QAExample:
    ex = QAExample(question=_io.req_str(rec, "question", where), answer=_io.req_str(rec, "answer", where),
                   split=split)
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


# ------------------------------------------------------------------ the task

def tofu_prompt(question: str) -> str:
    """The prompt an answer is scored / generated after."""
    return f"Question: {question}\nAnswer:"


def tofu_answer(answer: str) -> str:
    """The continuation that is scored: the answer with a leading space."""
    return " " + answer


QA_PER_AUTHOR = 20
"""TOFU's files hold 20 questions per fictitious author, in order: question ``i`` of a split is about author
``i // 20`` (forget01 = 2 authors, forget05 = 10, forget10 = 20)."""

RETAIN_OF = {"forget01": "retain99", "forget05": "retain95", "forget10": "retain90"}
"""Each forget split and the retain split that completes it to ``full``."""

HOLDOUT_OF = {"forget01": "holdout01", "forget05": "holdout05", "forget10": "holdout10"}
"""Each forget split and TOFU's holdout split of the same size (hub release only: fictitious authors never in
``full``, OpenUnlearning's MIA non-members)."""

TASK_METRICS = ("extraction_strength", "exact_memorization")
"""What every evaluation of a ``tofu:`` task adds (:data:`obliviate.eval.metric.METRICS` names), as
OpenUnlearning's ``eval=tofu`` reports them on the forget split. Its MIAs (forget vs holdout) are in the TOFU
report (:func:`obliviate.eval.tofu.tofu_metrics`) and the attack suite's ``mia``."""


def _pairs(examples: list[QAExample]) -> list[tuple[str, str]]:
    return [(ex.question, ex.answer) for ex in examples]


def _mcqs(examples: list[QAExample]) -> list[MCQExample]:
    """real_authors / world_facts questions with their four options (the answer is one of them)."""
    return [MCQExample(question=ex.question, choices=list(ex.options),
                       answer_index=ex.options.index(ex.answer),
                       split=f"{ex.split}_mcq") for ex in examples]


def _retain(split: str, forget: list[QAExample], root, allow_hub: bool) -> tuple[list[QAExample], bool]:
    """The retain split of ``split`` and whether it was derived from ``full``."""
    name = RETAIN_OF[split]
    base = _io.root_dir(root)
    path = base / "tofu" / f"{name}.json"
    full = base / "tofu" / "full.json"
    if path.is_file() or allow_hub:
        try:
            return load_tofu(name, root=root, allow_hub=allow_hub), False
        except _io.MissingFile as e:  # not on the hub either: derived from full.json, as without the hub
            if not full.is_file():
                raise DataError(f"TOFU split {name!r}: file not found: {path}, nor {full} to derive it from; "
                                f"nor on the hub ({e.hub}) ({_io.data_hint()})") from None
    elif not full.is_file():
        raise DataError(f"TOFU split {name!r}: file not found: {path}, nor {full} to derive it from "
                        f"({_io.data_hint(TOFU_HUB_ID)})")
    questions = {ex.question for ex in forget}
    return [ex for ex in load_tofu("full", root=root) if ex.question not in questions], True


def holdout_file(split: str, root=None):
    """Where the holdout split of forget split ``split`` is read from: ``<data>/tofu/holdoutNN.json``."""
    return _io.root_dir(root) / "tofu" / f"{HOLDOUT_OF[split]}.json"


def _holdout(split: str, root, allow_hub: bool = False) -> list[QAExample] | None:
    """TOFU's holdout split of the same size, read from ``tofu/holdoutNN.json`` (the forget split's format:
    one JSON record a line with ``question`` and ``answer``), else from the hub with ``allow_hub``; None when
    neither."""
    name = HOLDOUT_OF[split]
    base = _io.root_dir(root)
    path = holdout_file(split, root)
    if path.is_file():
        records = _io.iter_jsonl(path, _io.display(path, base))
    elif allow_hub:  # not on the hub either (offline, say): no holdout, as without the hub
        records = optional_hub_records(TOFU_HUB_ID, name, "train", path)
    else:
        records = None
    if records is None:
        return None
    out = [QAExample(question=_io.req_str(rec, "question", where), answer=_io.req_str(rec, "answer", where),
                     split=name) for where, rec in records]
    if not out:
        raise DataError(f"{_io.display(path, base)}: no records")
    return out


@register_task("tofu", help="TOFU fictitious authors: tofu:forget01|forget05|forget10",
               arguments=lambda: list(RETAIN_OF), needs_argument=True)
def tofu_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0, allow_hub: bool = False,
              **_) -> Task:
    """The TOFU task of forget split ``arg`` (see the module docstring)."""
    split = (arg or "").strip().lower()
    if split not in RETAIN_OF:
        raise ConfigError(f"task 'tofu:{arg}': unknown TOFU forget split {arg!r}; valid: "
                          f"{', '.join(RETAIN_OF)}")

    forget_all = load_tofu(split, root=root, allow_hub=allow_hub)
    retain_all, derived = _retain(split, forget_all, root, allow_hub)
    forget, retain = cut(forget_all, limit), cut(retain_all, limit)
    perturbed = {
        "forget": cut(load_tofu(f"{split}_perturbed", root=root, allow_hub=allow_hub), limit),
        "retain": cut(load_tofu("retain_perturbed", root=root, allow_hub=allow_hub), limit),
        "real_authors": cut(load_tofu("real_authors_perturbed", root=root, allow_hub=allow_hub), limit),
        "world_facts": cut(load_tofu("world_facts_perturbed", root=root, allow_hub=allow_hub), limit),
    }
    options = {s: cut(load_tofu(s, root=root, allow_hub=allow_hub),
                      limit) for s in ("real_authors", "world_facts")}

    evals = [EvalSet("forget_qa", "forget", "qa", perturbed["forget"]),
             EvalSet("retain_qa", "retain", "qa", perturbed["retain"]),
             EvalSet("real_authors_qa", "utility", "qa", perturbed["real_authors"]),
             EvalSet("world_facts_qa", "utility", "qa", perturbed["world_facts"]),
             EvalSet("real_authors_mcq", "utility", "mcq", _mcqs(options["real_authors"]), mcq_style="cloze"),
             EvalSet("world_facts_mcq", "utility", "mcq", _mcqs(options["world_facts"]), mcq_style="cloze")]

    holdout = _holdout(split, root, allow_hub)
    idk_path = _io.root_dir(root) / "tofu" / "idontknow.jsonl"
    retain_data = Data(qa=_pairs(retain))
    return Task(
        name=f"tofu:{split}",
        forget=Data(qa=_pairs(forget)),
        retain=retain_data,
        evals=evals,
        relearn=None,
        holdout=Data(qa=_pairs(cut(holdout, limit))) if holdout else None,
        prompt=PromptFormat(template=tofu_prompt("{question}"), answer_prefix=tofu_answer("")),
        idk=load_tofu_idk(root) if idk_path.is_file() else None,
        oracle_data=retain_data,
        groups=[f"{split}/author{i // QA_PER_AUTHOR}" for i in range(len(forget))],
        meta={"split": split, "retain_split": RETAIN_OF[split], "retain_derived": derived,
              "holdout_split": HOLDOUT_OF[split] if holdout else None,
              "holdout_file": str(holdout_file(split, root)),
              "perturbed": perturbed, "metrics": TASK_METRICS},
    )
