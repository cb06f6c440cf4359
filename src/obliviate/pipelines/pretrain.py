"""The pretraining run of ``obliviate pretrain`` (:mod:`obliviate.cli.pretrain`): a tiny model pretrained on
the world (:func:`~obliviate.train.pretrain.pretrain`, resumable), evaluated on it, with its loss curve and
``results.json``."""

from __future__ import annotations

import json
import logging

from obliviate.eval.suite import evaluate_task
from obliviate.runs.report import plot_loss_curve
from obliviate.runs.results import prepare_out_dir, same_run, write_results
from obliviate.tasks.world import task_from_world
from obliviate.train.distributed import is_main_process
from obliviate.train.pretrain import PretrainConfig, pretrain

log = logging.getLogger(__name__)


def run_pretrain(cfg: PretrainConfig, out, *, restart: bool = False,
                 progress: bool = False) -> tuple[dict, list[str]]:
    """Pretrain with ``cfg`` in the run directory ``out``: a rerun resumes its checkpoints unless they belong
    to another config (said in one line) or ``restart``; then the model is evaluated on its world, and rank 0
    writes ``loss.png`` and ``results.json``. Returns the metrics and the lines to print (none on other
    ranks)."""
    out = prepare_out_dir(out)
    same = same_run(out, {"command": "pretrain", "config": cfg})
    if not same and not restart:
        log.info(f"{out} holds checkpoints of another run (other config); starting afresh")
    res = pretrain(cfg, out, resume=same and not restart, progress=progress)
    metrics = evaluate_task(res["model"], res["tokenizer"], task_from_world(res["world"]), progress=progress)
    if not is_main_process():  # under accelerate launch rank 0 writes and prints
        return metrics, []
    plot_loss_curve(out / "metrics.jsonl", out / "loss.png", "pretraining loss (lm + qa terms)")
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, model_dir=str(out / "model"))
    return metrics, [json.dumps({k: round(v, 4) for k, v in metrics.items() if isinstance(v, float)},
                                indent=1)]
