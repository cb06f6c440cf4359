"""The negative control of a comparison on a user's model: which model to build the oracle from
(:func:`retain_control_input`), building it (:func:`build_oracle`: the model before it was taught the task,
fine-tuned on the retain data only), and the line of a comparison without one (:func:`missing_oracle`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from obliviate.errors import ConfigError
from obliviate.evidence.harness import not_run_line
from obliviate.evidence.positive_controls import NO_NEGATIVE_CONTROL, UNTAUGHT_HINT, no_verdict_line
from obliviate.evidence.retain_control import NO_CONTROL, RETAIN_FINETUNE, retain_finetune_control
from obliviate.evidence.verdict import verdict_line
from obliviate.methods import preset_name
from obliviate.runs.cache import ControlCache
from obliviate.runs.card import untaught_model
from obliviate.utils import recorded_path

log = logging.getLogger(__name__)


def retain_control_input(model: str | None, *, oracle: str | None = None, control: str | None = None,
                         base_untrained: str | None = None, allow_hub: bool = False) -> str | None:
    """The model compare fine-tunes on the retain data only to build the oracle (the negative control) beside
    ``model``: ``base_untrained``, else the finetune input named by ``model``'s cards, checked there (one that
    cannot be found fails in one line naming the card, before anything is loaded or written:
    :func:`~obliviate.runs.card.untaught_model`; a hub id with ``allow_hub``). By default it is built whenever
    that model is known and no ``oracle`` is given; ``control`` ``retain-finetune`` requires it (one line
    without), ``none`` builds none. None when there is none to build. A path is returned absolute
    (:func:`recorded_path`), as results.json records it."""
    if control == NO_CONTROL:
        if base_untrained:
            raise ConfigError("--base-untrained is what the oracle is built from, and --control "
                              f"{NO_CONTROL} builds none: give one of them")
        if not model or oracle:
            raise ConfigError(f"--control {NO_CONTROL} applies to --model without --oracle (without --model, "
                              "compare builds its own oracle: oracle=false skips it)")
        return None
    if control is None:  # the default: build it where it can be built
        if not model or oracle:
            if base_untrained:
                raise ConfigError("--base-untrained builds the oracle beside --model: give --model and no "
                                  "--oracle (without --model, compare builds its own oracle)")
            return None
        return recorded_path(base_untrained) or untaught_model(model, allow_hub=allow_hub)
    if not model or oracle:
        raise ConfigError(f"--control {RETAIN_FINETUNE} builds the oracle beside --model: give --model and "
                          "no --oracle (without --model, compare builds its own retain-only oracle)")
    untaught = recorded_path(base_untrained) or untaught_model(model, allow_hub=allow_hub)
    if untaught is None:
        raise ConfigError(f"--control {RETAIN_FINETUNE} fine-tunes the model before it was taught the task "
                          "on the retain data, and none is known: give --base-untrained DIR (no model card "
                          "of --model names an `obliviate finetune` input)")
    return untaught


def build_oracle(untaught: str, model: str | None, task, out: Path, load: Callable[[str], tuple], *,
                 seed: int = 0,
                 control: str | None = None, progress: bool = False,
                 cache: ControlCache | None = None) -> tuple[str, dict]:
    """``(the oracle's directory, what building it took)``: ``untaught`` fine-tuned on ``task``'s retain data
    only, with the settings ``model``'s cards record
    (:func:`~obliviate.evidence.retain_control.retain_finetune_control`), kept in ``cache`` (the cache of the
    controls; None: as a part of ``out``) and at ``out/models/oracle_retain``; ``load(path) -> (model,
    tokenizer)``. The summary holds its ``cost`` (when it was built) and whether it was ``reused``."""
    log.info(f"oracle: {untaught} fine-tuned on the retain data only (at {out / 'models' / 'oracle_retain'})"
             + ("" if control else f"; the default: --oracle DIR gives one, --control {NO_CONTROL} none"))
    return retain_finetune_control(untaught, model, task, out / "models" / "oracle_retain", load,
                                   preset=preset_name,
                                   seed=seed, progress=progress, cache=cache)


def missing_oracle(model: str | None, control: str | None = None) -> str:
    """The one line of a comparison with no negative control: no verdict, and what adds one."""
    if not model:
        return no_verdict_line(NO_NEGATIVE_CONTROL, "oracle=true (compare builds its "
                                                    "oracle beside its base model)")
    add = f"--oracle DIR (a model that never saw the forget data), or {UNTAUGHT_HINT}"
    if control == NO_CONTROL:
        add += f" and drop --control {NO_CONTROL}"
    return no_verdict_line(NO_NEGATIVE_CONTROL, add)


def verdict_lines(res: dict, model: str | None, control: str | None = None) -> list[str]:
    """What a comparison ends with: one verdict line per method (``verdict: <method>: <verdict> (<attack>,
    calibrated on <control>): <reason>``), or without a negative control one line saying what to add; before
    them one line per method asked for that did not run, with its reason (``method 'dpo' not run: needs
    ...``)."""
    skipped = [not_run_line("method", name, why) for name, why in (res.get("skipped") or {}).items()]
    if "oracle" not in res["metrics"]:
        return [*skipped, missing_oracle(model, control)]
    return skipped + [verdict_line("verdict: "
                                   f"{name}", v) for name, v in res["robustness"]["verdicts"].items()]
