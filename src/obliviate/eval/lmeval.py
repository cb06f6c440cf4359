"""lm-evaluation-harness bridge (optional extra ``obliviate[lmeval]``): lm-eval's ``HFLM`` on an in-memory
model, and zero-shot MCQ tasks (local files or lm-eval's own installed tasks) run by ``simple_evaluate`` for
parity checks.

``import lm_eval`` happens inside the functions; without it they raise :class:`ObliviateError`. The prompts,
the bos policy and the parity tests: docs/tofu.md, "Parity with lm-evaluation-harness".
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

from obliviate.errors import DataError, ObliviateError
from obliviate.tasks.sources.mcq import _read_mmlu_csv

TASK_NAME = "obliviate_local_mcq"


def require_lm_eval():
    """The ``lm_eval`` module, or one line saying how to install it."""
    try:
        import lm_eval
    except ImportError:
        raise ObliviateError("lm-evaluation-harness is not installed: "
                             "pip install 'obliviate[lmeval]'") from None
    return lm_eval


def lmeval_model(model, tokenizer, batch_size: int = 16, add_bos_token: bool | None = None):
    """lm-eval's ``HFLM`` around the in-memory ``model`` and ``tokenizer`` (``add_bos_token``: lm-eval's
    default, the tokenizer's own behaviour)."""
    require_lm_eval()
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, add_bos_token=add_bos_token)


def _task_yaml(task: str, data_file: Path, n_choices: int) -> str:
    letters = "ABCDEFGHIJ"[:n_choices]
    text = "{{question.strip()}}\n" + "".join(f"{c}. {{{{choices[{i}]}}}}\n" for i,
                                              c in enumerate(letters)) + "Answer:"
    lines = [
        f"task: {task}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {json.dumps(str(data_file))}",
        "test_split: test",
        "output_type: multiple_choice",
        "num_fewshot: 0",
        f"doc_to_text: {json.dumps(text)}",
        f"doc_to_choice: {json.dumps(list(letters))}",
        "doc_to_target: answer",
        "metric_list:",
        "  - metric: acc",
        "    aggregation: mean",
        "    higher_is_better: true",
    ]
    return "\n".join(lines) + "\n"


def _loglik(resp) -> float:
    """The log-likelihood of one lm-eval response: ``(ll, is_greedy)``, possibly wrapped in a list."""
    while isinstance(resp, (list, tuple)) and resp and isinstance(resp[0], (list, tuple)):
        resp = resp[0]
    return float(resp[0]) if isinstance(resp, (list, tuple)) else float(resp)


def lmeval_mcq_choices(model, tokenizer, mcqs, batch_size: int = 16,
                       installed_tasks: bool = True) -> list[int]:
    """The 0-based option lm-eval's log-likelihood picks for each MCQ (``question``, ``choices``,
    ``answer_index``). ``installed_tasks``: see :func:`_samples_local`."""
    if not mcqs:
        raise DataError("no MCQs to evaluate")
    n_choices = {len(m["choices"]) for m in mcqs}
    if len(n_choices) != 1:
        raise DataError("all MCQs must have the same number of choices "
                        f"for one lm-eval task, got {sorted(n_choices)}")
    docs = [{"question": m["question"], "choices": list(m["choices"]),
             "answer": int(m["answer_index"])} for m in mcqs]
    return _run_local(model, tokenizer, docs,
                      lambda data_file: _task_yaml(TASK_NAME, data_file, n_choices.pop()),
                      TASK_NAME, batch_size, installed_tasks)


def installed_task_yaml(task: str) -> Path:
    """The YAML file of lm-eval's installed task ``task`` (e.g. ``wmdp_bio``, ``mmlu_anatomy``)."""
    require_lm_eval()
    path = _installed_task_paths().get(task)
    if not path:
        raise DataError(f"lm-eval has no installed task {task!r}")
    return Path(path)


@functools.lru_cache(maxsize=1)
def _installed_task_paths() -> dict:
    """Each installed task's YAML path, from lm-eval's index of its own tasks: built once per process
    (indexing the few thousand installed YAMLs takes seconds, and they do not change while it runs)."""
    from lm_eval.tasks import TaskManager

    return {name: getattr(entry, "yaml_path", None) for name, entry in TaskManager().task_index.items()}


def lmeval_installed_task_choices(model, tokenizer, task: str, docs: list[dict],
                                  batch_size: int = 16) -> list[int]:
    """The 0-based option lm-eval's installed task ``task`` picks for each of ``docs`` (records in the
    dataset's own fields: ``question``, ``choices``, ``answer`` for WMDP and MMLU). A temporary YAML includes
    the task's own file unchanged and overrides only the data (``dataset_path: json`` on a local file), so the
    prompt, description and choices are lm-eval's."""
    yaml_path = installed_task_yaml(task)
    name = f"{task}_obliviate_local"

    def text(data_file: Path) -> str:
        return "\n".join([f"include: {json.dumps(str(yaml_path))}", f"task: {name}",
                          "dataset_path: json", "dataset_name: null", "dataset_kwargs:", "  data_files:",
                          "    test: "
                          f"{json.dumps(str(data_file))}", "test_split: test", "fewshot_split: test",
                          "num_fewshot: 0"]) + "\n"

    # included by path
    return _run_local(model, tokenizer, docs, text, name, batch_size, installed_tasks=False)


def lmeval_generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 24, until: str = "\n",
                    batch_size: int = 64, installed_tasks: bool = True) -> list[str]:
    """lm-eval's greedy continuation of each prompt (a local ``generate_until`` task run by
    ``simple_evaluate``), stopped at ``until`` or after ``max_new_tokens``: what
    :func:`obliviate.eval.core.greedy_generate` is timed against. ``installed_tasks``: see
    :func:`_samples_local`."""
    name = "obliviate_local_generate"

    def text(data_file: Path) -> str:
        return "\n".join([f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
                          "    test: "
                          f"{json.dumps(str(data_file))}", "test_split: test", "output_type: generate_until",
                          "num_fewshot: 0", 'doc_to_text: "{{prompt}}"', 'doc_to_target: "{{answer}}"',
                          "generation_kwargs:", "  until: "
                                                f"{json.dumps([until])}", f"  max_gen_toks: {max_new_tokens}",
                          "  do_sample: "
                          "false", "metric_list:", "  - metric: exact_match", "    aggregation: mean",
                          "    higher_is_better: true"]) + "\n"

    samples = _samples_local(model, tokenizer, [{"prompt": p, "answer": ""} for p in prompts], text, name,
                             batch_size,
                             installed_tasks)
    outs = []
    for s in samples:
        r = s.get("filtered_resps") or s["resps"]
        while isinstance(r, (list, tuple)):
            r = r[0] if r else ""
        outs.append(str(r))
    return outs


def _run_local(model, tokenizer, docs: list[dict], yaml_text, task: str, batch_size: int,
               installed_tasks: bool = True) -> list[int]:
    """:func:`_samples_local`, then the option chosen for each document (highest log-likelihood)."""
    samples = _samples_local(model, tokenizer, docs, yaml_text, task, batch_size, installed_tasks)
    choices = []
    for s in samples:
        resps = s.get("filtered_resps") or s["resps"]
        lls = [_loglik(r) for r in resps]
        choices.append(max(range(len(lls)), key=lambda i: lls[i]))
    return choices


def _samples_local(model, tokenizer, docs: list[dict], yaml_text, task: str, batch_size: int,
                   installed_tasks: bool = True) -> list[dict]:
    """Write ``docs`` as JSON Lines and ``yaml_text(data_file)`` as task ``task`` in a temporary directory,
    run it with ``simple_evaluate`` and return its samples in document order.

    ``installed_tasks``: the ``TaskManager`` also indexes lm-eval's few thousand installed task YAMLs, as it
    does by default (about 5 s on a laptop core, paid on every call); False indexes only the local task, which
    is all a self-contained YAML (or one that includes an installed YAML by its path) needs: the samples are
    the same."""
    require_lm_eval()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    if not docs:
        raise DataError("no documents to evaluate")
    with tempfile.TemporaryDirectory(prefix="obliviate-lmeval-") as tmp:
        tmp = Path(tmp)
        data_file = tmp / "data.jsonl"
        with open(data_file, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        (tmp / f"{task}.yaml").write_text(yaml_text(data_file))
        tm = TaskManager(include_path=str(tmp), include_defaults=installed_tasks)
        out = simple_evaluate(model=lmeval_model(model, tokenizer, batch_size), tasks=[task], num_fewshot=0,
                              task_manager=tm, log_samples=True)
    samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
    if len(samples) != len(docs):
        raise ObliviateError(f"lm-eval returned {len(samples)} samples for {len(docs)} questions")
    return samples


def lmeval_mmlu_choices(model, tokenizer, csv_path: str | os.PathLike, limit: int | None = None,
                        batch_size: int = 16) -> list[int]:
    """:func:`lmeval_mcq_choices` on the first ``limit`` questions of a local MMLU CSV file."""

    path = Path(csv_path)
    if not path.is_file():
        raise DataError(f"MMLU file not found: {path}")
    subject = path.stem.rsplit("_", 1)[0]
    mcqs = _read_mmlu_csv(path, path.name, subject, "local")[:limit]
    return lmeval_mcq_choices(model, tokenizer, mcqs, batch_size=batch_size)


def run_lmeval_tasks(model, tokenizer, tasks: list[str], include_path: str | os.PathLike | None = None,
                     limit: int | None = None, batch_size: int = 16, num_fewshot: int | None = None) -> dict:
    """lm-eval's ``simple_evaluate`` of ``tasks`` on the in-memory ``model``: ``{task: {metric: value}}``.

    ``include_path``: a directory of your own task YAMLs (local data files work offline; the hub's
    tasks download their data, which needs the network). ``limit``: the first N documents of each task.
    """
    require_lm_eval()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    if not tasks:
        raise DataError("no lm-eval tasks given")
    if include_path is not None and not Path(include_path).is_dir():
        raise DataError(f"lm-eval task directory not found: {include_path}")
    tm = TaskManager(include_path=None if include_path is None else str(include_path))
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        raise DataError(f"unknown lm-eval task(s): {', '.join(unknown)} "
                        "(local tasks need --lm-eval-include DIR)")
    out = simple_evaluate(model=lmeval_model(model, tokenizer, batch_size), tasks=list(tasks), limit=limit,
                          num_fewshot=num_fewshot, task_manager=tm)
    results = {}
    for task, values in out["results"].items():
        results[task] = {k.split(",")[0]: float(v) for k, v in values.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool) and "_stderr" not in k}
    return results
