"""The evaluation runs of ``obliviate eval`` (:mod:`obliviate.cli.eval`): a model on a task
(:func:`run_eval`: every metric of :func:`~obliviate.eval.suite.evaluate_task`, each QA/MCQ item's record, and
``results.json``), or on lm-evaluation-harness tasks (:func:`run_lmeval`). ``obliviate.evaluate`` returns the
metrics of :func:`~obliviate.eval.suite.evaluate_task` on a model in memory, without a run directory."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from obliviate.eval.lmeval import run_lmeval_tasks
from obliviate.eval.suite import EvalOptions, evaluate_task, item_records
from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results

log = logging.getLogger(__name__)


@dataclass
class EvalRunConfig:
    """The settings of one evaluation run (``obliviate eval``'s config file and ``key=value`` overrides)."""

    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world`` (former spelling: the keys without ``world.``)."""
    eval: EvalOptions = field(default_factory=EvalOptions)


def not_computed_lines(task, metrics: dict) -> list[str]:
    """What an evaluation left out, one line each: the task's parts whose files are missing
    (``task.meta["missing"]``), then each metric over zero items or tokens (``metrics["absent"]``)."""
    return [*(task.meta.get("missing") or []), *(metrics.get("absent") or {}).values()]


def run_eval(model, tok, task, cfg: EvalRunConfig, out, *, model_dir: str | None = None,
             progress: bool = False) -> tuple[dict, list[str]]:
    """Every metric of ``task`` on ``model`` into the run directory ``out``: ``results.json`` holds
    ``metrics.model`` and the task's summary, ``predictions.json`` each QA/MCQ set's records, one per item
    (:func:`~obliviate.eval.suite.item_records`: input, gold, prediction, score); what was left out
    (:func:`not_computed_lines`) goes to the ``obliviate`` logger, a line each. Returns the metrics and the
    lines to print."""
    out = prepare_out_dir(out)
    metrics = evaluate_task(model, tok, task, batch_size=cfg.eval.batch_size,
                            max_new_tokens=cfg.eval.max_new_tokens,
                            progress=progress, details=True)
    atomic_write_json(out / "predictions.json", item_records(task, metrics.pop("_per_item"), tok))
    write_results(out, seed=cfg.seed, config=cfg, metrics={"model": metrics}, model_dir=model_dir, task=task)
    lines = [json.dumps({k: round(v, 4) for k, v in metrics.items() if isinstance(v, float)}, indent=1)]
    for note in not_computed_lines(task, metrics):
        log.info(note)
    return metrics, lines


def run_lmeval(model, tok, tasks: list[str], out, *, seed: int = 0, include: str | None = None,
               limit: int | None = None, config: dict | None = None) -> dict:
    """lm-eval's numbers for ``model`` on ``tasks`` (``include``: a directory of the user's task YAMLs), in
    the run directory ``out``'s ``results.json`` under ``metrics.lm_eval`` with ``config``; returns them."""
    out = prepare_out_dir(out)
    res = run_lmeval_tasks(model, tok, tasks, include_path=include, limit=limit)
    write_results(out, seed=seed, config=config or {}, metrics={"lm_eval": res})
    return res
