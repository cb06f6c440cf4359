"""A negative control obliviate builds (issue #28, item 9; by default since issue #41, item 6, wherever the
model before it was taught the task is known): that model fine-tuned on the task's retain data only
(``--control retain-finetune``; ``--control none`` builds none), TOFU's retain model on any task, kept in the
cache of the controls (:mod:`obliviate.runs.cache`). docs/evaluation.md, "The negative control beside the
probe and the MIA".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Callable

from obliviate.config import to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.models.layers import count_passes
from obliviate.runs.cache import (ControlCache, model_digest, place_model, settings_key, task_fingerprint,
                                  tokenizer_digest)
from obliviate.runs.card import card_settings, finetune_card
from obliviate.runs.cost import stage_record
from obliviate.runs.parts import cached_part, kept_part
from obliviate.runs.results import input_fingerprint, stored_form
from obliviate.tasks.base import Task
from obliviate.train.distributed import save_trained
from obliviate.train.finetune import PRESETS, FinetuneConfig, finetune, training_data
from obliviate.utils import run_write_path, seed_everything

RETAIN_FINETUNE = "retain-finetune"
"""The name of this control on the command line (``--control retain-finetune``)."""

NO_CONTROL = "none"
"""``--control none``: no negative control is built (the default builds one wherever the untaught model is
known)."""

_FIELDS = {f.name for f in dataclasses.fields(FinetuneConfig)}

KEPT_OUT_OF_KEY = ("checkpoint_every",)
"""Fine-tuning settings that change how a build is kept, not what it computes: not part of the cache's key."""


def fine_tune_config(settings: dict, overrides: dict | None = None, seed: int = 0) -> FinetuneConfig:
    """The retain-only fine-tune's config: the fine-tuned model's recorded ``settings`` (its card's; {}
    without one: the defaults) with ``data="retain"``, then ``overrides`` (config keys of
    :class:`FinetuneConfig`).

    A recorded ``epochs`` / ``lr`` equal to the recorded preset's default is left to the preset, as it was for
    the fine-tuned model (so the preset's floor on steps applies to the retain-only run too); ``seed`` is the
    recorded one, else ``seed``."""
    preset = PRESETS.get(settings.get("preset"), {})
    kept = {k: v for k, v in settings.items() if k in _FIELDS and k not in ("data", "checkpoint_every")}
    for key in ("epochs", "lr"):
        if key in kept and preset and kept[key] == preset[key]:
            kept[key] = None
    kept.setdefault("seed", seed)
    given = dict(overrides or {})
    unknown = sorted(set(given) - _FIELDS)
    if unknown:
        raise ConfigError(f"config key 'control_finetune.{unknown[0]}' is not a fine-tuning setting (valid: "
                          f"{', '.join(sorted(_FIELDS - {'data'}))})")
    return FinetuneConfig(**{**kept, **given, "data": "retain"})


def has_retain_data(task: Task, control: str | None = None) -> bool:
    """Whether ``task`` has the retain data the retain-only control is trained on; where that control is asked
    for (``control`` ``retain-finetune``) a task without fails in one line (:class:`DataError`)."""
    try:
        training_data(task, "retain")
    except DataError:
        if control == RETAIN_FINETUNE:
            raise
        return False
    return True


def _retain_hash(task: Task) -> str:
    h = hashlib.sha256(json.dumps([task.retain.qa, task.retain.docs, to_dict(task.prompt)], sort_keys=True,
                                  default=str).encode())
    return h.hexdigest()[:16]


def checkpoints_dir(out_dir: Path, digest: str) -> Path:
    """Where the fine-tune of the control made by the key of ``digest`` keeps its checkpoints:
    ``out_dir/train/ <digest>``. What else ``out_dir/train`` holds (another key's checkpoints, or those of an
    obliviate before this layout) is removed first: it is never resumed into this control."""
    root = run_write_path(out_dir / "train")
    if root.is_dir():
        for p in root.iterdir():
            if p.name != digest:
                p = run_write_path(p)
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    return run_write_path(root / digest)


def _key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(stored_form(key), sort_keys=True).encode()).hexdigest()[:32]


def retain_finetune_control(untaught: str, taught: str | None, task: Task, out_dir: str | Path,
                            load: Callable[[str], tuple], *, preset: Callable[[object], str],
                            overrides: dict | None = None, seed: int = 0, progress: bool = False,
                            cache: ControlCache | None = None) -> tuple[str, dict]:
    """``(model directory, summary)`` of the retain-only control: ``untaught`` fine-tuned on ``task``'s retain
    data (module docstring), in ``out_dir/model``. With ``cache``
    (:class:`~obliviate.runs.cache.ControlCache`) it is an entry of the cache, by the untaught model's
    weights, the task and the settings, linked (else copied) into ``out_dir/model``; without,
    ``out_dir/part.json`` records what made it. The fine-tune's checkpoints are in ``out_dir/train/<digest>``
    either way (:func:`checkpoints_dir`): an interrupted build resumes, into the same control only.

    ``taught``: the model (or unlearned model) whose cards name the fine-tune to copy the settings of (None:
    the defaults); ``load(path) -> (model, tokenizer)``; ``preset(model)`` names the size preset when no card
    says. The summary's ``cost`` is what building it took (:func:`~obliviate.runs.cost.stage_record`; when it
    was built, for a reused one), ``cache`` the entry (None without ``cache``) and ``reused`` whether it was
    found there; ``untaught`` and ``settings_from`` (the card whose settings it copies) are this run's, never
    those of the run that built it (the cache holds no path).
    """
    out_dir = run_write_path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    card = finetune_card(taught) if taught else None
    settings = card_settings(card) if card is not None else {}
    cfg = fine_tune_config(settings, overrides, seed)
    model_dir = out_dir / "model"
    # this run's, never cached
    here = {"untaught": str(untaught), "settings_from": str(card) if card else None}

    def train_into(model, tok, directory: Path, digest: str) -> dict:
        """What is kept: the fine-tune's settings and what it cost (no path, so any run may read it)."""
        seed_everything(cfg.seed)
        t = time.perf_counter()
        with count_passes(model) as passes:
            model, summary = finetune(model, tok, training_data(task, "retain"), cfg,
                                      checkpoints_dir(out_dir, digest),
                                      prompt=task.prompt, preset=settings.get("preset") or preset(model),
                                      progress=progress, resume=True)
        save_trained(model, directory, tok)
        return {"finetune": summary["finetune"], "cost": stage_record(passes, time.perf_counter() - t)}

    if cache is not None:
        model, tok = load(untaught)
        key = {"control": RETAIN_FINETUNE, "untaught": model_digest(model),
               "tokenizer": tokenizer_digest(tok),
               "task": task_fingerprint(task),
               "finetune": {k: v for k, v in settings_key(cfg).items() if k not in KEPT_OUT_OF_KEY},
               "preset": settings.get("preset") or preset(model)}
        held = {"model": model}  # built: trained in place, then freed
        del model
        entry = cache.path("retain-control", key)

        def build(staged: Path) -> dict:
            return train_into(held.pop("model"), tok, staged / "model", entry.name)

        hit = cache.get("retain-control", key, build, what=f"the negative control ({untaught} "
                                                           "fine-tuned on the retain data only)")
        held.clear()
        place_model(hit.path / "model", model_dir)
        return str(model_dir), {**{k: v for k, v in hit.items() if k not in here}, **here,
                                "cache": str(hit.path),
                                "reused": hit.reused}
    key = {"untaught": input_fingerprint(untaught), "retain": _retain_hash(task), "task": task.summary(),
           "finetune": to_dict(cfg), "preset": settings.get("preset"), "settings_from": here["settings_from"]}

    def build_here() -> dict:
        model, tok = load(untaught)
        return train_into(model, tok, run_write_path(model_dir), _key_digest(key))

    if not (model_dir / "config.json").exists():
        (out_dir / "part.json").unlink(missing_ok=True)  # a part whose model is gone is made again
    kept = kept_part(out_dir / "part.json", key) is not None  # made by an earlier run into this --out
    info, _ = cached_part(run_write_path(out_dir / "part.json"), key, build_here)
    return str(model_dir), {**{k: v for k, v in info.items() if k not in here}, **here, "cache": None,
                            "reused": kept}
