"""The one fine-tuning run, which ``obliviate finetune`` (:mod:`obliviate.cli.finetune`) and
``obliviate.finetune`` (:mod:`obliviate.api`) call: teach a model a task's forget and retain data (TOFU's
first step, on any model) with :func:`~obliviate.train.finetune.finetune`; given a run directory, resume its
checkpoints, evaluate the taught model, and write the model with its card, the loss curve and
``results.json``."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field

from obliviate.eval.suite import EvalOptions, eval_kwargs, evaluate_task
from obliviate.methods import preset_name
from obliviate.runs.card import write_model_card
from obliviate.runs.cost import CostRecord, cost_line
from obliviate.runs.report import plot_loss_curve
from obliviate.runs.results import prepare_out_dir, resumes, write_results
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.train.finetune import FinetuneConfig, finetune, training_data
from obliviate.utils import seed_everything

log = logging.getLogger(__name__)


@dataclass
class FinetuneRunConfig:
    """The settings of one fine-tuning run (``obliviate finetune``'s config file and ``key=value``
    overrides)."""

    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world``."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)


def check_finetune_inputs(cfg: FinetuneRunConfig, task) -> None:
    """The check of a run's data that needs no model: the task has data for ``cfg.finetune.data`` (one line if
    not)."""
    training_data(task, cfg.finetune.data)


def run_finetune(model, tok, task, cfg: FinetuneRunConfig, out=None, *, base_model: str | None = None,
                 fingerprint: dict | None = None, in_place: bool = True,
                 progress: bool = False) -> tuple[object, dict]:
    """Teach ``model`` (a copy unless ``in_place``) ``task``'s training data (``cfg.finetune.data``) with
    ``cfg``. Given ``out``, the run directory: checkpoints in ``out/train`` (a rerun with the same config,
    task, data and ``fingerprint`` resumes them; one line says why another does not), then the taught model is
    evaluated, and ``out/model`` with its card, ``loss.png`` and ``results.json`` are written (rank 0).

    Returns ``(model, info)``: the training summary (``finetune``: the settings used, ``data``, ``history``),
    its ``cost`` (:class:`~obliviate.runs.cost.CostRecord`'s; also in results.json and the card), and with
    ``out`` also ``metrics`` and ``lines`` (what the command prints, the cost line last)."""
    # no data for the choice: one line, before anything is written
    data = training_data(task, cfg.finetune.data)
    out = prepare_out_dir(out) if out is not None else None
    resume = False
    if out is not None:
        resume = resumes(out, {"command": "finetune", "config": cfg, **(fingerprint or {})}, task, log)
    seed_everything(cfg.seed)
    preset = preset_name(model)
    target = model if in_place else copy.deepcopy(model)
    cost = CostRecord()  # each stage's passes, tokens and seconds (runs.cost)
    with cost.stage("finetune", target):
        new, summary = finetune(target, tok, data, cfg.finetune, out / "train" if out is not None else None,
                                prompt=task.prompt, preset=preset, progress=progress, resume=resume)
    info = dict(summary)
    if out is None:
        return new, {**info, "cost": cost.as_dict()}
    with cost.stage("evaluate:after", new):
        metrics = evaluate_task(new, tok, task, **eval_kwargs(cfg, progress))
    info["cost"] = cost.as_dict()
    save_trained(new, out / "model", tok)  # rank 0 writes, in one process or several
    info.update(metrics=metrics, lines=[])
    if not is_main_process():  # under a launcher rank 0 writes and prints
        return new, info
    write_model_card(out / "model", base_model=base_model, task=task, method="finetune",
                     settings=summary["finetune"], metrics=metrics, cost=info["cost"])
    plot_loss_curve(out / "train" / "metrics.jsonl", out / "loss.png", f"fine-tuning on {task.name}")
    write_results(out, seed=cfg.seed, config=cfg, metrics={"finetuned": metrics},
                  model_dir=str(out / "model"),
                  base_model_dir=None if base_model is None else str(base_model), task=task,
                  finetune=summary["finetune"], data=summary["data"], cost=info["cost"])
    scores = {k: round(v, 4) for k, v in metrics.items() if k.endswith("_score")}
    info["lines"] = [f"fine-tuned on {task.name} ({data.describe()}): {scores}", f"model: {out / 'model'}",
                     cost_line(info["cost"])]
    return new, info
