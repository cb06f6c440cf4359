"""``benchmark:<name>``: a public benchmark by name (:mod:`obliviate.tasks.sources.benchmarks`: ``wmdp_bio``,
``mmlu``, ``mmlu:anatomy``, ``medmcqa``, ``tofu_forget10``, ...) as a task, and :func:`benchmark_task` for a
user's file of QA pairs or MCQs (``obliviate eval --data``).

One evaluation set, the benchmark, with the role a run gives it, and its questions alternately as forget and
retain QA pairs; text sets (RealToxicityPrompts) are refused. docs/tofu.md, "Evaluating a model on a public
benchmark".
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from obliviate.errors import ConfigError, DataError, setting
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, register_task
from obliviate.tasks.base import records_inputs
from obliviate.tasks.sources.generic import read_records
from obliviate.tasks.sources.benchmarks import benchmark_kind, benchmark_names, get_benchmark
from obliviate.tasks.tofu import tofu_answer, tofu_prompt

KINDS = ("qa", "mcq")
"""What a benchmark task can evaluate."""


def load_benchmark_examples(name: str | None = None, *, data: str | os.PathLike | None = None,
                            kind: str | None = None, mapping: dict | str | None = None,
                            limit: int | None = None, **loader_kw) -> tuple[str, str, list]:
    """``(name, kind, examples)`` of a registered benchmark ``name`` or of a user file ``data``.

    With ``data``, ``kind`` (qa or mcq; None: told from the file) and ``mapping`` (schema field -> the file's
    field) go to the one detector and reader every user file goes through
    (:func:`obliviate.tasks.sources.generic. read_records`): a file ``--utility`` or a task spec reads is read
    here too; ``name`` defaults to the file stem. ``limit`` keeps the first ``limit`` examples (in file
    order); a JSON Lines, CSV or text ``data`` file is read no further.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"limit={limit} must be a positive number of examples")
    if data is not None:
        if kind is not None and kind not in KINDS:
            raise ConfigError(f"{setting('kind=', '--kind ')}{kind!r} cannot "
                              f"be evaluated (valid: {', '.join(KINDS)})")
        kind, examples = read_records(data, kind=kind, mapping=mapping, limit=limit, kinds=("mcq", "qa"))
        if kind not in KINDS:
            raise DataError(f"{data}: a file of texts, not of QA pairs or MCQs: nothing to score an answer "
                            "on (evaluate texts as a task's text "
                            "set: " + setting("task_from_files", "--forget/--retain")
                            + ", or a task spec)")
        name = name or Path(data).stem
    else:
        if not name:
            raise ConfigError("no benchmark given: pass a benchmark name or a data file")
        if kind is not None or mapping:
            raise ConfigError(setting("kind and mapping apply to a user file given as data=..., not to a "
                                      "named "
                                      "benchmark", "--kind and --mapping apply to a user file given with "
                                                   "--data, not to a named benchmark"))
        kind = benchmark_kind(name)
        if kind == "text":
            raise ConfigError(f"benchmark {name!r} is a set of text prompts, not an accuracy benchmark: "
                              "evaluate toxicity of continuations instead "
                              "(obliviate.eval.toxicity.continuation_toxicity)")
        examples = get_benchmark(name, **loader_kw)
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise DataError(f"benchmark {name!r} has no examples")
    return name, kind, examples


def benchmark_role(name: str, from_file: bool = False) -> str:
    """The role of benchmark ``name``'s evaluation set (module docstring)."""
    if from_file:
        return "utility"
    if name.startswith(("wmdp_", "tofu_forget")):
        return "forget"
    return "retain" if name.startswith("tofu_retain") else "utility"


WMDP_TOPICS = {"wmdp_bio": "biology", "wmdp_chem": "chemistry", "wmdp_cyber": "cybersecurity"}
"""The topic each lm-eval ``wmdp_*`` task names in its description (lm_eval/tasks/wmdp/wmdp_*.yaml)."""


def lm_eval_description(example) -> str:
    """lm-eval's task description of a WMDP or MMLU question (the text its shipped task puts before the
    prompt): ``"The following are multiple choice questions (with answers) about {topic}.\\n\\n"``, the topic
    being :data:`WMDP_TOPICS`'s or the MMLU subject with ``_`` as spaces (lm-eval's
    mmlu/_generate_configs.py); ``""`` for any other question."""
    split, subject = example.get("split") or "", example.get("subject")
    topic = WMDP_TOPICS.get(split) or (" ".join(subject.split("_")) if split.startswith("mmlu") and subject
                                       else None)
    return f"The following are multiple choice questions (with answers) about {topic}.\n\n" if topic else ""


def _described(ex):
    """``ex`` with its lm-eval description in ``meta["description"]`` (unchanged when it has none)."""
    description = lm_eval_description(ex) if dataclasses.is_dataclass(ex) else ""
    return dataclasses.replace(ex, meta={**ex.meta, "description": description}) if description else ex


def _pair(ex, kind: str) -> tuple[str, str]:
    if kind == "mcq":
        return ex["question"], ex["choices"][ex["answer_index"]]
    return ex["question"], ex["answer"]


@records_inputs
def benchmark_task(name: str | None = None, *, data: str | os.PathLike | None = None, kind: str | None = None,
                   mapping: dict | str | None = None, limit: int | None = None, **loader_kw) -> Task:
    """The task of benchmark ``name``, or of the user file ``data`` (with ``kind`` and ``mapping``; reported
    under ``name``, default ``utility_<file stem>``, the name a task spec gives the same file as a utility
    set, so one file has one set name, ``utility_<stem>_acc``, whichever way it is given); ``loader_kw``
    (``root=``, ``allow_hub=``) go to the loader."""
    named = bool(name)
    name, kind, examples = load_benchmark_examples(name, data=data, kind=kind, mapping=mapping, limit=limit,
                                                   **loader_kw)
    set_name = name.replace(":", "_") if named or data is None else f"{benchmark_role(name, True)}_{name}"
    pairs = [_pair(ex, kind) for ex in examples]
    role = benchmark_role(name, from_file=data is not None)
    if kind == "mcq" and data is None:
        examples = [_described(ex) for ex in examples]
    return Task(
        name=f"benchmark:{name}",
        forget=Data(qa=pairs[0::2]),
        retain=Data(qa=pairs[1::2]),
        evals=[EvalSet(set_name, role, kind, examples)],
        prompt=PromptFormat(template=tofu_prompt("{question}"), answer_prefix=tofu_answer("")),
        meta={"benchmark": name, "kind": kind, "data": str(data) if data is not None else None},
    )


@register_task("benchmark", help="a public benchmark by name as one evaluation set: benchmark:wmdp_bio, "
                                 "benchmark:mmlu:anatomy, benchmark:medmcqa, benchmark:tofu_forget10, ...",
               arguments=benchmark_names, needs_argument=True)
def benchmark_provider(arg: str | None, *, root=None, limit: int | None = None, allow_hub: bool = False,
                       **_) -> Task:
    """The task of benchmark ``arg`` (see the module docstring)."""
    return benchmark_task((arg or "").strip(), limit=limit, root=root, allow_hub=allow_hub)
