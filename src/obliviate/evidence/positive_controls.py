"""What a verdict needs beside the attacked model, shared by ``obliviate compare`` and ``obliviate attack``:
the positive controls built from the base model (:func:`positive_controls`, :func:`build_positive_control`)
and the the oracle band's item count (:func:`attack_items`) and, without a verdict, :func:`no_verdict_line`
saying what to add.

A verdict (:func:`obliviate.evidence.verdict.robustness_summary`) reads every attack on the base model, on a
negative control (the oracle: a model that never saw the forget data) and on the positive controls (models
known to only suppress it); without a negative control no attack is calibrated and there is no verdict to
give.
"""

from __future__ import annotations

from typing import Callable

from obliviate.errors import DataError
from obliviate.evidence.controls import small_norm_control, suppression_control, suppression_qa
from obliviate.utils import seed_everything


def positive_controls(cfg) -> dict[str, tuple[Callable, dict]]:
    """The positive controls ``cfg`` asks for, by their metrics name: ``{name: (builder, keyword
    arguments)}``.

    ``cfg`` has ``positive_control`` (build :func:`~obliviate.evidence.controls.suppression_control`, as
    ``positive_control``), ``small_norm_control`` (with it, also
    :func:`~obliviate.evidence.controls.small_norm_control`, as ``positive_control_smallnorm``) and their
    keyword arguments ``positive_control_args`` / ``small_norm_args`` (``CompareConfig``, ``attack``'s
    config)."""
    out = {}
    if cfg.positive_control:
        out["positive_control"] = (suppression_control, cfg.positive_control_args)
        if cfg.small_norm_control:
            out["positive_control_smallnorm"] = (small_norm_control, cfg.small_norm_args)
    return out


def build_positive_control(build: Callable, base_model, tokenizer, task, *, seed: int,
                           kwargs: dict | None = None, progress: bool = False) -> tuple[object | None, dict]:
    """``(control, info)``: ``build(base_model, tokenizer, task, seed=seed, **kwargs)`` from a fresh seed, and
    its info (what was built: no wall seconds, so that the cache of the controls keeps it as it is; the run
    adds its own); ``(None, {"skipped": why})`` on a task it cannot be built on (e.g. MCQs only: no forget
    questions to refuse). ``progress``: the builder's bar (on a terminal)."""
    seed_everything(seed)
    try:
        control, info = build(base_model, tokenizer, task, seed=seed, progress=progress, **(kwargs or {}))
    except DataError as e:
        return None, {"skipped": str(e)}
    return control, dict(info)


def attack_items(task, attacks) -> int | None:
    """How many forget items the attacks score (the oracle band's width,
    :func:`obliviate.evidence.verdict.robustness_summary`): the forget questions, up to the attacks'
    ``max_eval``; None for a task without forget questions."""
    try:
        return min(len(suppression_qa(task)), attacks.max_eval)
    except DataError:
        return None


NO_NEGATIVE_CONTROL = ("no negative control (a model that never saw the forget data), so no attack is "
                       "calibrated")
"""Why there is no verdict without an oracle."""

UNTAUGHT_HINT = ("--base-untrained DIR (the model before it was taught the task, which obliviate fine-tunes "
                 "on the retain data only; read from the model "
                 "cards when `obliviate finetune` made the model)")
"""What builds the negative control by default."""


def no_verdict_line(why: str, add: str) -> str:
    """The one line said instead of a verdict: why there is none and what to add."""
    return f"no verdict: {why}: add {add}"
