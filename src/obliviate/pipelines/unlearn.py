"""The one unlearn run, which ``obliviate unlearn`` (:mod:`obliviate.cli.unlearn`), ``obliviate tune`` and
``obliviate.unlearn`` (:mod:`obliviate.api`) call: the settings (:func:`unlearn_settings`), the checks that
need no model (:func:`check_unlearn_inputs`; with the loading, in order: :func:`prepare_run`), then
:func:`run_unlearn`: evaluate before, unlearn, evaluate after, the outcome and, given a run directory, the
model, its card and ``results.json``. What it has to say goes to the ``obliviate`` loggers (the command line
shows them as its ``obliviate: ...`` lines)."""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.config import build_config, deep_merge, from_fields, to_dict
from obliviate.errors import ConfigError
from obliviate.eval.outcome import unlearn_outcome
from obliviate.eval.suite import EvalOptions, eval_kwargs, evaluate_task, knows_forget_set, score_against
from obliviate.methods import METHODS, build_method, preset_name, resolve_method
from obliviate.pipelines.tune.run import (TuneConfig, keep_text, setting_text, trial_config, tune,
                                          validation_split, write_tuned_settings)
from obliviate.runs.card import card_settings, read_model_card, write_model_card
from obliviate.runs.cost import CostRecord, cost_line
from obliviate.runs.results import prepare_out_dir, same_run, write_results
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.train.finetune import PRESETS as FINETUNE_PRESETS, training_data
from obliviate.unlearning.engine import (UnlearnConfig, check_overlap, check_run_keys, check_unlearn_config,
                                         check_unlearn_data, check_unlearn_run, method_settings, run_settings,
                                         unlearn)
from obliviate.utils import seed_everything

log = logging.getLogger(__name__)


@dataclass
class UnlearnRunConfig:
    """The settings of one unlearn run: the config file and ``key=value`` overrides of ``obliviate unlearn`` /
    ``tune`` (``unlearn.train.lr=1e-4``), which the API's keywords set too (``train={"lr": 1e-4}``: the same
    keys)."""

    seed: int = 0
    world: dict = field(default_factory=dict)
    """Keys of the world's config (``world.n_forget=20``) for ``--task world``; the world seed is
    ``--seed``."""
    unlearn: UnlearnConfig = field(default_factory=UnlearnConfig)
    eval: EvalOptions = field(default_factory=EvalOptions)
    tune: TuneConfig = field(default_factory=TuneConfig)
    """``obliviate tune`` and ``unlearn --tune``: the grid, the budget, the constraint and the validation
    split."""


def finetune_lr_factor(model_dir) -> tuple[float, str | None]:
    """(factor, why): the fine-tuning run's learning rate over its size preset's, when ``model_dir`` was
    taught by ``obliviate finetune`` (its model card's settings say ``lr`` and ``preset``,
    :func:`~obliviate.runs.card. card_settings`); else ``(1.0, None)``.

    A method's preset lr is a fixed fraction of the fine-tuning preset's (tiny: 3e-3, e.g. NPO's 3e-4 a tenth
    of it; paper: 1e-5): the step size at which this model learned the facts. A model taught at another lr
    gets the method's lr times this factor, so the fraction holds; at the preset's own lr the factor is 1 and
    nothing moves."""
    if not model_dir or not Path(model_dir).is_dir():
        return 1.0, None
    meta = read_model_card(model_dir)
    if not isinstance(meta.get("obliviate"), dict) or meta["obliviate"].get("method") != "finetune":
        return 1.0, None
    settings = card_settings(model_dir)
    lr, preset = settings.get("lr"), settings.get("preset")
    if preset not in FINETUNE_PRESETS or isinstance(lr,
                                                    bool) or not isinstance(lr, (int, float)) or not lr > 0:
        return 1.0, None
    factor = float(lr) / FINETUNE_PRESETS[preset]["lr"]
    if abs(factor - 1.0) < 1e-9:
        return 1.0, None
    return factor, (f"the method's preset lr scaled by {factor:.3g}: the model was fine-tuned at lr {lr:g}, "
                    f"the {preset} fine-tuning preset's is {FINETUNE_PRESETS[preset]['lr']:g}")


def unlearn_settings(method: str, preset: str, *, seed: int = 0, config_file=None,
                     overrides: list[str] | None = None,
                     run: dict | None = None, eval: dict | None = None, model_dir=None,
                     prefix: str = "unlearn") -> UnlearnRunConfig:
    """The settings of a run of ``method`` (any case: :func:`~obliviate.methods.resolve_method`), each key
    once: dataclass defaults, then the method's ``preset`` (its lr times :func:`finetune_lr_factor` of
    ``model_dir``), then ``run`` (the API's keywords: keys of :class:`UnlearnConfig`, as a comparison's
    ``runs.<name>``), then ``config_file``, then the dotted ``overrides`` (the command line); checked without
    a model (a bad key named under ``prefix``). The method and the seed are the run's own (``--method``,
    ``--seed``): ``unlearn.method`` or ``unlearn.seed`` naming others is an error. A registered name is taken
    as it is (:func:`prepare_run` resolves the user's once)."""
    method = method if method in METHODS else resolve_method(method)
    base: dict = {"seed": seed, "eval": dict(eval or {}),
                  "unlearn": method_settings(method, preset, seed, finetune_lr_factor(model_dir)[0])}
    if run:
        check_run_keys(method, run, prefix="")
        from_fields(UnlearnConfig, run, prefix="")  # the keywords and their values, named as given (stpes)
        base = deep_merge(base, {"unlearn": run})
    cfg = build_config(UnlearnRunConfig, config_file, overrides, base=base)
    if cfg.unlearn.method != method:  # --config or unlearn.method=... named another method
        if resolve_method(cfg.unlearn.method) != method:
            raise ConfigError(f"config key 'unlearn.method' ({cfg.unlearn.method!r}) contradicts --method "
                              f"{method}: the method is named by --method alone (drop unlearn.method)")
        cfg.unlearn.method = method
    # a second seed for the unlearning alone: a half-true run seed
    if cfg.unlearn.seed not in (seed, cfg.seed):
        raise ConfigError(f"config key 'unlearn.seed' ({cfg.unlearn.seed}) contradicts the run's seed "
                          f"{cfg.seed}: the seed is set once (--seed, "
                          "or seed=... in the config; drop unlearn.seed)")
    cfg.unlearn.seed = cfg.seed  # seed=... in the config file seeds the unlearning too
    check_unlearn_config(cfg.unlearn, prefix=prefix)
    return cfg


def check_unlearn_inputs(cfg: UnlearnRunConfig, task, tokenizer=None, *, tokenizer_fn=None,
                         tuning: bool = False):
    """The checks of a run's data that need no model (with ``tokenizer``, or ``tokenizer_fn()`` loading it
    only where a check needs it), in order; returns the validation split
    (:func:`~obliviate.pipelines.tune.run.validation_split`) when ``tuning``, else None."""
    ucfg = cfg.unlearn
    edit = METHODS[ucfg.method].kind == "edit"
    if tuning and edit:
        raise ConfigError(f"tune: {ucfg.method!r} is an edit method: "
                          "it has no learning rate or steps to tune")
    # a forget pair among the held-out retain pairs is an overlap too (issue #42)
    if task.meta.get("retain_heldout"):
        check_overlap(task.forget, training_data(task, "retain"), ucfg.allow_overlap)
    split = validation_split(task, cfg.tune.val_fraction, cfg.tune.split_seed) if tuning else None
    if edit:
        check_overlap(task.forget, task.retain, ucfg.allow_overlap)
    else:  # the data and the lengths, with the tokenizer alone: before the model is loaded
        tok = tokenizer if tokenizer is not None else tokenizer_fn()
        check_unlearn_data(tok, task.forget, task.retain, ucfg, prompt=task.prompt)
    return split


def prepare_run(method: str, *, load_task, load_tokenizer, load_model, seed: int = 0, config_file=None,
                overrides: list[str] | None = None, eval: dict | None = None, model_dir=None,
                tuning: bool = False, model_size=None):
    """``(cfg, task, model, tokenizer, preset, split)``: the checks of a run from its inputs, each before what
    costs more: the settings (:func:`unlearn_settings`, every key, built once at the preset of the model's
    size, ``model_size()``: its parameter count read without its weights, None where unknown: the tiny
    preset), the task (``load_task(cfg)``), its data with the tokenizer alone (``load_tokenizer()``,
    :func:`check_unlearn_inputs`), then the model (``load_model()``, returning ``(model, tokenizer)``); the
    settings are built again only where the loaded model's size picks another preset. ``obliviate unlearn``
    and ``obliviate tune`` give the loaders of their arguments."""
    method = resolve_method(method)  # once: every build below takes the registered name

    def settings(preset):
        return unlearn_settings(method, preset, seed=seed, config_file=config_file, overrides=overrides,
                                eval=eval, model_dir=model_dir)

    n = model_size() if model_size is not None else None
    preset = preset_name(n) if n is not None else "tiny"
    cfg = settings(preset)
    task = load_task(cfg)
    split = check_unlearn_inputs(cfg, task, tokenizer_fn=load_tokenizer, tuning=tuning)
    model, tok = load_model()
    if preset_name(model) != preset:  # a size its config did not tell
        preset = preset_name(model)
        cfg = settings(preset)
    return cfg, task, model, tok, preset, split


def run_tuning(model, tok, cfg: UnlearnRunConfig, split, out: Path, *, fingerprint: dict,
               progress: bool = False,
               log_line=None) -> tuple[dict, str]:
    """The grid on the validation task (:func:`~obliviate.pipelines.tune.run.tune`, parts in ``out/tune``),
    the chosen settings written to ``out/tuned.yaml``; returns the result and the line that says the
    choice."""
    result = tune(model, tok, split[0], cfg.unlearn, cfg.tune, out / "tune", progress=progress,
                  eval_kw={k: v for k, v in eval_kwargs(cfg, False).items() if k != "progress"},
                  fingerprint={**fingerprint, "task": split[0].summary(), "seed": cfg.seed},
                  log=log_line or (lambda line: None))
    write_tuned_settings(out / "tuned.yaml", result)
    c = result["chosen"]
    line = (f"tune {cfg.unlearn.method}: chose {setting_text(c)}"
            + f" (trial {c['index'] + 1} of {len(result['trials'])}; validation: forget removed "
              f"{c['forgot'] or 0.0:.3f}, {keep_text(c)}"
            + ("" if result["feasible"] else f"; no trial kept {cfg.tune.retain_share:.2f} "
                                             "of the base: the best trade-off") + f"); "
            f"settings: {out / 'tuned.yaml'}, report: {out / 'tune' / 'report.md'}")
    return result, line


def run_unlearn(model, tok, task, cfg: UnlearnRunConfig, out=None, *, preset: str,
                base_model: str | None = None,
                fingerprint: dict | None = None, split=None, tune_log=None, in_place: bool = True,
                judge: bool = True, progress: bool = False) -> tuple[object, dict]:
    """Unlearn ``task``'s forget data from ``model`` (a copy unless ``in_place``) with ``cfg``: evaluate
    before (with ``judge``), unlearn, evaluate after, the outcome. Given ``out``, the run directory:
    checkpoints in ``out/train`` (a rerun with the same ``fingerprint``, config and task resumes them), the
    model in ``out/model`` with its card, and ``results.json``. ``split`` (:func:`check_unlearn_inputs` with
    ``tuning``): first choose the settings on its validation task (:func:`run_tuning`, needs ``out``), then
    train on all the data and report on the rest.

    Returns ``(model, info)``: ``method``, ``settings`` (:func:`run_settings`), the training summary, ``cost``
    (each stage's passes, tokens and seconds: :class:`~obliviate.runs.cost.CostRecord`; also in
    ``results.json`` and the card), and with ``judge`` ``before`` / ``after`` / ``outcome`` and ``lines``
    (what the command prints, the cost line before the outcome). ``cfg`` is a plan :func:`unlearn_settings`
    checked: it is read here, not checked again (the method is built once, and the checks that need the model
    run before ``out`` is made)."""
    method = cfg.unlearn.method
    built = build_method(method, cfg.unlearn.params)
    why = finetune_lr_factor(base_model)[1]
    if why and built.kind != "edit":
        log.info(why)
    check_unlearn_run(model, tok, task.forget, task.retain, cfg.unlearn, prompt=task.prompt, method=built)
    out = prepare_out_dir(out) if out is not None else None
    fingerprint = dict(fingerprint or {})
    info: dict = {}
    cost = CostRecord()  # each stage's passes, tokens and seconds (runs.cost)
    # settings chosen on the validation items; trained on all the data, reported on the others
    if split is not None:
        if out is None:
            raise ConfigError("tuning writes its trials and chosen settings in a run directory: give out")
        with cost.stage("tune", model):  # every trial's copy of the model is counted with it
            tuned, line = run_tuning(model, tok, cfg, split, out, fingerprint=fingerprint, progress=progress,
                                     log_line=tune_log)
        info["tune_line"] = line
        # the caller's is kept
        cfg = dataclasses.replace(cfg, unlearn=trial_config(cfg.unlearn, tuned["chosen"]))
        # the chosen params (each trial's were checked by its run)
        built = build_method(method, cfg.unlearn.params)
        task = split[1]
        info["tune"] = {k: tuned[k] for k in ("chosen", "feasible", "settings", "trials", "retain_share")}
    resume = False
    if out is not None:  # a rerun into the same out resumes the training checkpoints, unless of another run
        resume = same_run(out, {"command": "unlearn", "config": cfg, "task": task.summary(), **fingerprint})
        if not resume:
            log.info(f"{out} holds checkpoints of another run (other config or model); starting afresh")
    seed_everything(cfg.seed)
    ekw = eval_kwargs(cfg, progress)
    before = None
    if judge:
        with cost.stage("evaluate:before", model):
            before = evaluate_task(model, tok, task, **ekw)
    if judge and knows_forget_set(before) is False:
        log.warning(f"the base model does not know the forget set: forget score {before['forget_score']:.3f} "
                    f"(chance {before.get('forget_chance', 0.0):.3f}); unlearning it shows nothing. Teach it "
                    "first (obliviate finetune) or check the prompt format (--template, --chat-template)")
    target = model if in_place else copy.deepcopy(model)
    t = time.perf_counter()
    new, summary = unlearn(target, tok, task.forget, task.retain, cfg.unlearn, out / "train" if out else None,
                           prompt=task.prompt, idk=task.idk, progress=progress, resume=resume, method=built)
    # the method's, its reference's included
    cost.add("unlearn", summary.get("passes"), time.perf_counter() - t)
    info.update(method=method, settings=run_settings(cfg.unlearn),
                **{k: v for k, v in summary.items() if k not in ("method", "method_obj")})
    if not judge:
        if out is not None:
            save_trained(new, out / "model", tok)
        info["cost"] = cost.as_dict()
        return new, info
    with cost.stage("evaluate:after", new):
        after = evaluate_task(new, tok, task, **ekw)
    after.update(score_against(before, after))
    outcome = unlearn_outcome(before, after, method=method)
    info.update(before=before, after=after, outcome=outcome)
    info["lines"] = [f"{method} on {task.name}: " + ", ".join(
        f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in ("forget_score", "retain_score", "utility_score")
        if isinstance(before.get(k), float)) + (f", S-unlearning {after['s_unlearning']:.3f}"
                                                 if "s_unlearning" in after else "")]
    if out is not None:
        save_trained(new, out / "model", tok)  # rank 0 writes, in one process or several
        info["lines"].append(f"model: {out / 'model'}")
    info["cost"] = cost.as_dict()
    if out is not None:
        if is_main_process():
            write_model_card(out / "model", base_model=base_model, task=task, method=method,
                             settings=to_dict(cfg.unlearn), metrics=after, outcome=outcome, cost=info["cost"])
            write_results(out, seed=cfg.seed, config=cfg, metrics={"base": before, method: after},
                          model_dir=str(out / "model"), base_model_dir=base_model, task=task,
                          preset=preset, data=summary["data"], reference=summary.get("reference", "none"),
                          passes=summary.get("passes"), unlearn_outcome=outcome, cost=info["cost"],
                          **({"tune": info["tune"], "reported_on": "the items left out of "
                                                                   "the validation split"}
                             if "tune" in info else {}),
                          **({"edit": summary["edit"]} if "edit" in summary else {}))
    info["lines"] += [cost_line(info["cost"]), outcome["line"]]
    return new, info


def run_tune(model, tok, cfg: UnlearnRunConfig, split, out, *, preset: str, fingerprint: dict,
             progress: bool = False, tune_log=None) -> tuple[dict, list[str]]:
    """``obliviate tune``: the grid alone (:func:`run_tuning`) in the run directory ``out``, with
    ``results.json``; returns the result and the lines to print."""
    check_unlearn_run(model, tok, split[0].forget, split[0].retain, cfg.unlearn, prompt=split[0].prompt)
    out = prepare_out_dir(out)
    result, line = run_tuning(model, tok, cfg, split, out, fingerprint=fingerprint, progress=progress,
                              log_line=tune_log)
    if is_main_process():
        write_results(out, seed=cfg.seed, config=cfg, metrics={"base": result["base"]}, task=split[0],
                      preset=preset, tune=result, tuned_file=str(out / "tuned.yaml"))
    return result, [line, f"use it: obliviate unlearn --method {cfg.unlearn.method} --config "
                          f"{out / 'tuned.yaml'} (with the same model and task)"]
