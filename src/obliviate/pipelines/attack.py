"""The one attack run, which ``obliviate attack`` (:mod:`obliviate.cli.attack`) and ``obliviate.attack``
(:mod:`obliviate.api`) call: the settings (:func:`attack_settings`), the negative control
(:func:`negative_control_input`), the checks that need no model (:func:`check_attack_inputs`), then
:func:`run_attack`: the attacks on the model, on the negative control and, for the verdict, on the base model
and the positive controls built from it. What it has to say goes to the ``obliviate`` loggers (the command
line shows them as its ``obliviate: ...`` lines)."""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from obliviate.config import build_config, deep_merge
from obliviate.errors import ConfigError
from obliviate.eval.suite import evaluate_task
from obliviate.evidence.harness import TaskAttackConfig, announce_skipped, attack_names, run_task_attacks
from obliviate.evidence.positive_controls import (NO_NEGATIVE_CONTROL, UNTAUGHT_HINT, attack_items,
                                                 build_positive_control, no_verdict_line, positive_controls)
from obliviate.evidence.retain_control import (NO_CONTROL, RETAIN_FINETUNE, fine_tune_config, has_retain_data,
                                             retain_finetune_control)
from obliviate.evidence.verdict import control_readout, robustness_summary, verdict_line
from obliviate.methods import preset_name
from obliviate.models.layers import count_passes
from obliviate.runs.cache import control_cache, model_digest, settings_key, task_fingerprint, tokenizer_digest
from obliviate.runs.card import untaught_model
from obliviate.runs.cost import CostRecord, stage_record
from obliviate.runs.report import plot_relearn_curves
from obliviate.runs.results import input_fingerprint, prepare_out_dir, resumes, stored_form, write_results
from obliviate.train.distributed import save_trained
from obliviate.utils import recorded_path, seed_everything

log = logging.getLogger(__name__)

UNTAUGHT = "untaught"
ORACLE = "oracle"
"""``negative_control_kind`` of a control given as ``--oracle DIR``."""

CONTROLS = (RETAIN_FINETUNE, UNTAUGHT, NO_CONTROL)
"""``--control``: the negative control built (the default, where the untaught model is known), attacked as it
is, or none."""


@dataclass
class AttackRunConfig:
    """The settings of one attack run: the config file and ``key=value`` overrides of ``obliviate attack``."""

    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config for ``--task world`` (the world seed is ``--seed``)."""
    attacks: TaskAttackConfig = field(default_factory=TaskAttackConfig)
    control_finetune: dict = field(default_factory=dict)
    """With ``--control retain-finetune`` (the default where the untaught model is known): keys of the
    retain-only fine-tune's config (:class:`~obliviate.train.finetune.FinetuneConfig`) over the settings the
    fine-tuned model's card records (``control_finetune.epochs=20``)."""
    positive_control: bool = True
    """With ``--base`` and a negative control: build the positive control from ``--base`` and attack it, for
    the verdict (:func:`obliviate.evidence.controls.suppression_control`; as ``compare``'s)."""
    positive_control_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.evidence.controls.suppression_control` (``max_steps``,
    ``lr``)."""
    small_norm_control: bool = True
    """With ``positive_control``, also the small-norm suppression control
    (:func:`obliviate.evidence.controls.small_norm_control`), which calibrates quantization."""
    small_norm_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.evidence.controls.small_norm_control`."""
    eval_batch_size: int = 32
    """Batch size of the evaluations the verdict reads (each model's forget score before the attacks)."""
    cache: bool = True
    """Keep the controls (the negative control's model, the positive controls' models) and the attacks on them
    and on the base model in the cache shared by every run directory (:mod:`obliviate.runs.cache`), and reuse
    them: a second attack on the same base attacks only the new model. ``--no-cache`` (``cache=false``) builds
    them here."""


def attack_settings(seed: int = 0, config_file=None, overrides: list[str] | None = None,
                    attacks: str | None = None, base: dict | None = None) -> AttackRunConfig:
    """The run's settings, each key once: the dataclass defaults, ``base`` (the API's keywords), ``seed`` at
    every seed of the run, the attacks named by ``attacks`` (``"relearn,probe"``, ``"all"``; an unknown name
    fails in one line), then ``config_file`` and the dotted ``overrides``."""
    given = deep_merge(base or {}, {"seed": seed, "attacks": {"seed": seed, "relearn": {"seed": seed}}})
    if attacks:
        given = deep_merge(given, {"attacks": {"select": attack_names(attacks)}})
    return build_config(AttackRunConfig, config_file, overrides, base=given)


def negative_control_input(model: str | None, *, base: str | None = None, base_untrained: str | None = None,
                           oracle: str | None = None, control: str | None = None,
                           allow_hub: bool = False) -> tuple[str | None, str]:
    """``(the model the negative control is made from, control kind)``. ``oracle`` (``--oracle DIR``) is the
    control itself (kind ``oracle``). Otherwise the model before it was taught the task is ``base_untrained``,
    else the finetune input named by the model cards of ``base`` or ``model``, checked there (a card naming a
    model that cannot be found fails in one line naming the card, before anything is loaded or written:
    :func:`~obliviate.runs.card.untaught_model`; a hub id with ``allow_hub``); without ``control`` the
    negative control is that model fine-tuned on the retain data (``retain-finetune``) where it is known, else
    there is none; ``control`` ``retain-finetune`` or ``untaught`` without one fails in one line."""
    if oracle:
        if control or base_untrained:
            raise ConfigError("--oracle is the negative control: give "
                              "it without --control and --base-untrained")
        return oracle, ORACLE
    looked_up = control != NO_CONTROL or base_untrained  # --control none reads no card
    untrained = recorded_path(base_untrained) or (untaught_model(base or model,
                                                                 allow_hub=allow_hub) if looked_up
                                                  else None)
    kind = control or (RETAIN_FINETUNE if untrained else NO_CONTROL)
    if kind == NO_CONTROL:
        if base_untrained:
            raise ConfigError(f"--base-untrained is the negative control's model, and --control {NO_CONTROL} "
                              "attacks none: give one of them")
        return None, kind
    if untrained is None:
        what = "fine-tunes" if kind == RETAIN_FINETUNE else "attacks"
        raise ConfigError(f"--control {kind} {what} the model before it was taught the task, and none is "
                          "known: give --base-untrained DIR (no model card of --base or --model names an "
                          "`obliviate finetune` input)")
    return untrained, kind


def check_attack_inputs(cfg: AttackRunConfig, task, untrained: str | None, kind: str, *,
                        control: str | None = None) -> str:
    """The checks that need no model, in order; returns the control kind, ``untaught`` where a default
    retain-only control has no retain data to fine-tune on (said in one line). ``control``: the kind asked for
    (None: the default)."""
    if kind == RETAIN_FINETUNE:  # bad settings and a task without retain data fail before any load
        fine_tune_config({}, cfg.control_finetune)
        if not has_retain_data(task, control):
            log.info(f"task {task.name!r} has no retain data to fine-tune {untrained} on: its negative "
                     "control is that model as it is")
            kind = UNTAUGHT
    if kind != RETAIN_FINETUNE and cfg.control_finetune:
        raise ConfigError(f"config key 'control_finetune' applies to --control {RETAIN_FINETUNE} only")
    return kind


def no_verdict(base: str | None, kind: str, control: str | None = None) -> str | None:
    """Why this run gives no verdict, as the line that says what to add; None when it gives one."""
    why, add = [], []
    if not base:
        why.append("no model before unlearning")
        add.append("--base DIR (the model before unlearning: the verdict reads its attacks and builds the "
                   "positive controls from it)")
    if kind == NO_CONTROL:
        why.append(NO_NEGATIVE_CONTROL)
        add.append(f"--oracle DIR (a model that never saw the forget data), or {UNTAUGHT_HINT}"
                   + (f" and drop --control {NO_CONTROL}" if control == NO_CONTROL else ""))
    return no_verdict_line(" and ".join(why), " and ".join(add)) if why else None


def run_attack(task, cfg: AttackRunConfig, out=None, *, model: str, load: Callable[[str], tuple],
               base: str | None = None, untrained: str | None = None, kind: str = NO_CONTROL,
               load_control: Callable[[str], tuple] | None = None, control: str | None = None,
               fingerprint: dict | None = None, progress: bool = False) -> dict:
    """The attacks of ``cfg`` on ``model``, on the negative control (``untrained`` as ``kind`` says:
    fine-tuned on the retain data, as it is, or the oracle itself) and, with ``base`` and a negative control,
    on ``base`` and the positive controls built from it, with the verdict. Models are named (a directory, a
    hub id, or any name ``load`` knows) and loaded one at a time: ``load(name) -> (model, tokenizer)`` for
    ``model`` and ``base``, ``load_control`` (default ``load``) for the negative control. ``control``: the
    kind asked for (None: the default). Given ``out``, the run directory: relearning checkpoints (a rerun with
    the same ``fingerprint`` of the inputs, config and data resumes them), the relearning plot and
    ``results.json``.

    Returns ``metrics`` (the model's, with the negative control's readout), ``negative_control`` (its metrics
    or None), ``verdict`` (None without one), ``no_verdict`` (the line that says what gives one, or None),
    ``negative_control_dir`` and, with a verdict, ``reference_metrics`` and ``positive_controls``."""
    if kind == RETAIN_FINETUNE and out is None:
        raise ConfigError(f"the {RETAIN_FINETUNE} control is trained and cached in a run directory: give out")
    load_control = load_control or load
    missing = no_verdict(base, kind, control)
    cfg.attacks.relearn.progress = progress
    skipped = announce_skipped(task, cfg.attacks)  # each in one line, before any model is loaded
    cost = CostRecord()  # every stage's passes, tokens and seconds, the controls' included
    loaded, tok = load(model)
    resume = False
    if out is not None:
        out = prepare_out_dir(out)
        # A rerun into the same out resumes the relearning checkpoints, unless they belong to another run.
        # either way
        resume = resumes(out, {"command": "attack", "config": dataclasses.replace(cfg, cache=True),
                               **(fingerprint or {}), "control": kind,
                               "untrained": input_fingerprint(untrained)}, task, log)
    seed_everything(cfg.seed)
    base_model = load(base)[0] if base else None
    # a verdict: every model is evaluated (its forget score before the attacks) and attacked
    judge = missing is None
    scores: dict = {}  # the base model's scores, computed once for every model attacked
    # no control: nothing to keep (nor weights to hash)
    store = control_cache(cfg.cache) if untrained else None
    key = None if store is None else {  # what every control's attacks read beside the control itself
        "task": task_fingerprint(task), "attacks": settings_key(cfg.attacks), "seed": cfg.seed,
        "judge": judge,
        "eval_batch_size": cfg.eval_batch_size, "tokenizer": tokenizer_digest(tok),
        "base": None if base_model is None else model_digest(base_model)}

    def attacked(m, who: str, relearn_dir: str) -> tuple[dict, dict]:
        """(metrics, cost stages) of ``m``: evaluated (with a verdict) and attacked, from the run's seed, so
        that its numbers do not depend on what ran before (a control found in the cache, or built here)."""
        seed_everything(cfg.seed)
        stages: dict = {}
        ev = None
        if judge:
            t = time.perf_counter()
            with count_passes(m) as passes:
                ev = evaluate_task(m, tok, task, batch_size=cfg.eval_batch_size, progress=progress)
            stages[f"evaluate:{who}"] = stage_record(passes, time.perf_counter() - t)
        if judge and who != "model":
            log.info(f"attacking the {who.replace('_', ' ')}")
        per: dict = {}
        att = run_task_attacks(m, tok, task, cfg.attacks, base_model=base_model, metrics=ev,
                               out_dir=None if out is None else out / relearn_dir, resume=resume,
                               base_cache=scores,
                               costs=per)
        stages.update({f"attack:{who}:{name}": rec for name, rec in per.items()})
        return {**(ev or {}), **att}, stages

    def control_metrics(who: str, relearn_dir: str, identity: dict | None, get_model: Callable[[], tuple],
                        ) -> tuple[dict | None, dict]:
        """(metrics, info) of a control (or the base model) attacked as the model is: ``get_model() -> (model
        or None, info)`` makes it (None: it cannot be made on this task, ``info`` says why); with the cache,
        both are read from the entry of ``identity`` (the control's own) where it holds them. The metrics are
        JSON-clean either way, so a run with the cache and one without read the same numbers."""
        spent: dict = {}  # stage -> whether it ran here (False: its own entry was found in the cache)

        def make(_folder=None) -> dict:
            m, info = get_model()
            spent.update(info.pop("spent", {}))
            stages = dict(info.pop("stages", {}))
            if m is None:
                return {"metrics": None, "info": info, "cost": stages}
            metrics_, att = attacked(m, who, relearn_dir)
            return {"metrics": metrics_, "info": info, "cost": {**stages, **att}}

        t = time.perf_counter()
        if store is None:
            made, reused = stored_form(make()), False
        else:
            made = store.get("attacked", {**key, "attacked": identity}, make,
                             what=f"the attacks on the {who.replace('_', ' ')}")
            reused = made.reused
        for name, rec in made["cost"].items():
            # found in the cache: nothing spent here, it cost this to build
            if reused or not spent.get(name, True):
                cost.add(name, None, 0.0, control=True, cached=True, built=rec)
            else:
                cost.add(name, rec, rec["seconds"], control=True)
        if reused:
            cost.add(f"cache:{who}", None, time.perf_counter() - t, control=True, cached=True,
                     entry=str(made.path))
        info = dict(made["info"])  # as stored: what was built, never when or how long
        stage = next((s for s in made["cost"] if s.startswith("build:")), None)
        # a control built here (in this many seconds) or found made
        if stage is not None and "skipped" not in info:
            info.update({"cached": True} if reused or not spent.get(stage, True)
                        else {"seconds": made["cost"][stage]["seconds"]})
        return made["metrics"], info

    def positive_control(cname: str, build: Callable, kwargs: dict) -> Callable[[], tuple]:
        """``get_model`` of :func:`control_metrics` for the positive control ``cname``: built from the base
        model or, with the cache, read from its entry (by the base model's weights, the builder and its
        settings)."""
        stage = f"build:{cname}"

        def made_here(folder=None) -> dict:
            t = time.perf_counter()
            # the builder's copy of the base model is counted with it
            with count_passes(base_model) as passes:
                ctl, info = build_positive_control(build, base_model, tok, task, seed=cfg.seed, kwargs=kwargs,
                                                   progress=progress)
            if ctl is not None and folder is not None:
                save_trained(ctl, folder / "model", tok)
            held["model"] = ctl
            return {"info": info, "cost": stage_record(passes, time.perf_counter() - t)}

        held: dict = {}

        def get_model() -> tuple:
            if store is None:
                got, reused = made_here(), False
            else:
                got = store.get("positive-control", positive_key(cname, build, kwargs), made_here,
                                what=f"the {cname} built from {base}")
                reused = got.reused
            ctl = held.pop("model", None)
            if ctl is None and reused and "skipped" not in got["info"]:
                ctl = load_control(str(got.path / "model"))[0]
            info = {**got["info"], "stages": {stage: got["cost"]}, "spent": {stage: not reused}}
            return ctl, info

        return get_model

    def positive_key(cname: str, build: Callable, kwargs: dict) -> dict:
        return {"control": cname, "builder": f"{build.__module__}.{build.__qualname__}", "args": kwargs,
                **{k: key[k] for k in ("base", "tokenizer", "task")}, "seed": cfg.seed}

    metrics, stages = attacked(loaded, "model", "relearn")
    for name, rec in stages.items():
        cost.add(name, rec, rec["seconds"])
    # wall time is not a metric: same seed, same metrics
    seconds = sum(rec["seconds"] for rec in stages.values())
    del loaded
    negative, control_dir, control_build = None, untrained, None
    if untrained:  # the negative control: the same attacks on the model before it was taught the task
        identity = None
        if kind == RETAIN_FINETUNE:  # ... fine-tuned on the retain data only
            log.info(f"negative control: {untrained} fine-tuned on the retain data only"
                     + ("" if control else f"; the default: --control {UNTAUGHT} attacks {untrained} as it "
                                           f"is, --control {NO_CONTROL} attacks none"))
            t = time.perf_counter()
            control_dir, control_build = retain_finetune_control(
                untrained, base or model, task, out / "control", load_control, preset=preset_name,
                overrides=cfg.control_finetune, seed=cfg.seed, progress=progress, cache=store)
            built_cost = control_build.pop("cost", None)
            if control_build.get("reused"):
                cost.add("build:negative_control", None, time.perf_counter() - t, control=True, cached=True,
                         built=built_cost, entry=control_build["cache"])
            else:
                cost.add("build:negative_control", built_cost, time.perf_counter() - t, control=True)
            if store is not None:
                identity = {"built": Path(control_build["cache"]).name}
            ctl_model = None
        else:  # ... or as it is
            log.info(f"negative control: {untrained} ("
                     + ("--oracle" if kind == ORACLE else "the model before it was taught the task") + ")")
            ctl_model = load_control(control_dir)[0]
            identity = None if store is None else {"weights": model_digest(ctl_model)}
        # loaded already (its weights are its identity), else loaded when attacked
        held_ctl = {"model": ctl_model}
        del ctl_model

        def negative_model() -> tuple:
            m = held_ctl.pop("model", None)
            return (load_control(control_dir)[0] if m is None else m), {}

        negative, _ = control_metrics("negative_control", "relearn_control", identity, negative_model)
        held_ctl.clear()
    else:
        log.info("no negative control (--oracle, --base-untrained, or a model card naming the finetune "
                 "input): the probe and MIA figures are uncalibrated")
    references, built, verdict = {}, {}, None
    if judge:  # the base model and the positive controls built from it, attacked as compare attacks them
        references["base"], _ = control_metrics("base_model", "relearn_base",
                                                None if key is None else {"weights": key["base"]},
                                                lambda: (base_model, {}))
        for cname, (build, kwargs) in positive_controls(cfg).items():
            log.info(f"positive control: {cname} built from {base}")
            identity = (None if store is None
                        else {"built": store.path("positive-control",
                                                  positive_key(cname, build, kwargs)).name})
            m, built[cname] = control_metrics(cname, f"relearn_{cname}", identity,
                                              positive_control(cname, build, kwargs))
            if m is not None:
                references[cname] = m
        summary = robustness_summary(copy.deepcopy({**references, "oracle": negative, "model": metrics}),
                                     items=attack_items(task, cfg.attacks))
        verdict = {**summary["verdicts"]["model"], "calibration": summary["calibration"]}
        verdict["line"] = verdict_line("verdict", verdict)
    base_model = None  # freed: every attack that reads it has run
    metrics.update(control_readout(metrics, negative))
    record = cost.as_dict()
    # asked for, not run: the data it needs is missing, or it read none
    if skipped or metrics.get("attacks_skipped"):
        metrics["attacks_skipped"] = {**skipped, **metrics.get("attacks_skipped", {})}
    if out is not None:
        plot_relearn_curves(metrics, out / "relearn_curve.png")
        write_results(out, seed=cfg.seed, config=cfg, metrics={**{k: v for k, v in metrics.items()
                                                                   # (its own key below)
                                                                   if k != "attacks_skipped"},
                                                                "negative_control": negative},
                      model_dir=str(model), base_model_dir=base, negative_control_dir=control_dir,
                      negative_control_kind=None if negative is None else kind,
                      untaught_model_dir=None if kind == ORACLE else untrained,
                      **({"negative_control_build": control_build} if control_build else {}),
                      verdict=verdict, **({"no_verdict": missing} if missing else {}),
                      attacks_skipped=metrics.get("attacks_skipped", {}),
                      **({"reference_metrics": references, "positive_controls": built} if judge else {}),
                      task=task, timings={"attack_seconds": seconds}, cost=record)
    return {"metrics": metrics, "negative_control": negative, "negative_control_dir": control_dir,
            "verdict": verdict, "no_verdict": missing, "cost": record,
            **({"reference_metrics": references, "positive_controls": built} if judge else {})}
