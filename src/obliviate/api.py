"""The Python API: load a task, then unlearn, evaluate, attack and compare, on models in memory (a Hugging Face
causal LM and its tokenizer as objects, nothing written unless given a directory); the commands run the same
pipelines underneath. Examples and the mapping to the commands: docs/api.md."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.eval.suite import evaluate_task
from obliviate.evidence.harness import TaskAttackConfig, attack_names
from obliviate.methods import preset_name
from obliviate.models.builders import param_count
from obliviate.models.load import load_model
from obliviate.pipelines.attack import AttackRunConfig, run_attack
from obliviate.pipelines.compare.oracle import retain_control_input
from obliviate.pipelines.compare.run import compare_plan, compare_settings, run_compare_dir
from obliviate.pipelines.finetune import FinetuneRunConfig, run_finetune
from obliviate.pipelines.unlearn import check_unlearn_inputs, run_unlearn, unlearn_settings
from obliviate.tasks import Task
from obliviate.tasks import load_task as _load_spec
from obliviate.tasks.files import task_from_files
from obliviate.train.finetune import FinetuneConfig

log = logging.getLogger(__name__)


Paths = str | Path | dict | Sequence[str | Path | dict] | None


def _paths(p: Paths) -> list[str | dict] | None:
    """Paths as strings; a spec entry ``{path, mapping, ...}`` is kept as it is."""
    if p is None:
        return None
    if isinstance(p, (str, Path, dict)):
        p = [p]
    return [x if isinstance(x, dict) else str(x) for x in p]


def load_task(spec: str | Task | None = None, *, forget: Paths = None, retain: Paths = None,
              utility: Paths = None,
              holdout: Paths = None, relearn: Paths = None, mapping: str | dict | None = None,
              template: str | None = None, chat: bool = False, limit: int | None = None,
              **options: Any) -> Task:
    """A task: a named one (``"world"``, ``"tofu:forget10"``, ``"wmdp:bio"``, ``"muse:news"``,
    ``"ember:harry_potter"``, ``"file:spec.yaml"``; see ``obliviate tasks``) or your own files.

    ``forget`` / ``retain`` / ``utility`` / ``holdout`` / ``relearn``: a path or a list of paths (JSON
    Lines, JSON, CSV/TSV or text; fields are recognised by name). ``mapping`` names other fields:
    ``"question=q,answer=a"`` for every file, or per file as a spec has it, keyed by set or path
    (``{"forget": "answer=true_answer", "retain.csv": "question=q"}``; a file it does not name keeps its
    own fields). ``template``: the prompt, with ``{question}``; ``chat``: the tokenizer's chat template
    (for a named task too: they replace its prompt's). ``limit`` cuts every set to its first N records.
    ``options`` go to a named task's provider (e.g. ``seed`` for the world, ``root`` for the data
    directory); an option that cannot apply is an error, not dropped.
    """
    if forget is not None:
        if spec is not None:
            raise ConfigError("load_task: give a task name or forget/retain files, not both")
        if options:
            raise ConfigError(f"load_task: option(s) {', '.join(sorted(options))} "
                              "apply to a named task, not to forget/retain files")
        return task_from_files(_paths(forget), _paths(retain), utility=_paths(utility),
                               holdout=_paths(holdout),
                               relearn=_paths(relearn), mapping=mapping, template=template, chat=chat,
                               limit=limit)
    if any(x is not None for x in (retain, utility, holdout, relearn)):
        raise ConfigError("load_task: retain/utility/holdout/relearn files need forget files too")
    if mapping is not None:
        raise ConfigError("load_task: mapping applies to forget/retain files; a "
                          "task spec file gives each of its files its own mapping")
    task = _load_spec(spec or "world", **({"limit": limit} if limit is not None else {}), **options)
    if chat or template is not None:
        prompt = dataclasses.replace(task.prompt, **({"chat": True} if chat else {"template": template}))
        task = dataclasses.replace(task, prompt=prompt)  # a Task given as spec is left as it was
    return task


def _check_task(fn: str, task) -> None:
    if not isinstance(task, Task):
        raise ConfigError(f"{fn}: task must be an obliviate Task (see "
                          f"obliviate.load_task), got {type(task).__name__}")


def finetune(model, tokenizer, task: Task, *, in_place: bool = False, seed: int = 0, data: str = "both",
             out_dir: str | Path | None = None, progress: bool = False, **config: Any):
    """Teach ``model`` the task (TOFU's first step): train on its forget and retain data (``data="retain"``:
    retain only, an oracle where the task has none); the run of ``obliviate finetune``
    (:func:`obliviate.pipelines.finetune.run_finetune`), on a model in memory. Returns ``(model, info)``;
    ``model`` is not changed unless ``in_place=True``. ``config``: keys of
    :class:`~obliviate.train.finetune.FinetuneConfig` (``epochs``, ``lr``, ``batch_size``, ...; defaults by
    model size). ``out_dir``: the run directory, as ``obliviate finetune --out`` writes it (checkpoints in
    ``train/``, which a rerun resumes, then the taught model evaluated, ``model/`` with its card and
    ``results.json``; the metrics also in ``info["metrics"]``); default: nothing is written or evaluated."""
    _check_task("finetune", task)
    cfg = FinetuneRunConfig(seed=seed,
                            finetune=from_dict(FinetuneConfig, {**config, "seed": seed, "data": data},
                                                           prefix="finetune"))
    name = getattr(model, "name_or_path", None) or None
    new, info = run_finetune(model, tokenizer, task, cfg, out_dir, in_place=in_place, progress=progress,
                             base_model=name, fingerprint={"model": name})
    info.pop("lines", None)
    return new, info


def unlearn(model, tokenizer, task: Task, method: str = "npo", *, in_place: bool = False, seed: int = 0,
            preset: str | None = None, out_dir: str | Path | None = None, progress: bool = False,
            judge: bool = True, **overrides: Any):
    """Unlearn ``task``'s forget data from ``model`` with ``method``, keeping its retain data: the run of
    ``obliviate unlearn`` (:func:`obliviate.pipelines.unlearn.run_unlearn`), on a model in memory.

    Returns ``(unlearned_model, info)``. **``model`` is not changed**: a copy is trained, unless
    ``in_place=True`` (which saves the memory of a copy; the returned model is then ``model``
    itself, or with LoRA a merged new object). ``info`` has the settings used (``settings``) and the
    training summary (``history``, ``data``: what was encoded).

    The method's own defaults apply, chosen by model size (``preset``: ``"tiny"`` under 100M parameters, else
    ``"paper"``), with the learning rate scaled as ``obliviate unlearn`` scales it for a model that
    ``obliviate finetune`` taught (``model.name_or_path`` a directory with its card); ``overrides`` change
    them, with the keys of ``obliviate unlearn``'s ``unlearn.*`` (and a comparison's ``runs.<name>``): e.g.
    ``train={"lr": 1e-4, "steps": 20}``, ``batch_size=8``, ``lora=True``, ``allow_overlap=True``,
    ``max_len=128`` and ``params`` (a dict of the method's own parameters, e.g. ``params={"beta": 0.2}``).
    ``out_dir``: the run directory, as ``obliviate unlearn --out`` writes it (checkpoints in ``train/``, which
    a rerun resumes, the model in ``model/`` with its card, and ``results.json``); default: nothing is
    written. Same ``seed``, same machine: same model, and the same as ``obliviate unlearn`` gives.

    With ``judge`` (the default), the task is evaluated before and after (``info["before"]``,
    ``info["after"]``) and the run's outcome (:func:`obliviate.eval.outcome.unlearn_outcome`: "ok", "forgot
    little" or "retain lost", as ``obliviate unlearn`` gives it) is ``info["outcome"]``, its one line logged
    (logger ``obliviate.api``, level INFO). The API never prints: what it has to say goes to the ``logging``
    loggers ``obliviate.*`` (warnings at WARNING, notes at INFO; ``logging.basicConfig(level="INFO")`` shows
    them all). The outcome reads no attack: whether the knowledge is gone or only suppressed is ``obliviate
    attack``'s or ``obliviate compare``'s verdict.
    """
    _check_task("unlearn", task)
    model_dir = getattr(model, "name_or_path", None) or None
    cfg = unlearn_settings(method, preset or preset_name(model), seed=seed, run=overrides,
                           model_dir=model_dir,
                           prefix="")  # a bad keyword is named as given (params.alpah), before any evaluation
    check_unlearn_inputs(cfg, task, tokenizer)
    new, info = run_unlearn(model, tokenizer, task, cfg, out_dir, preset=preset or preset_name(model),
                            base_model=model_dir, fingerprint={"base": model_dir}, in_place=in_place,
                            judge=judge,
                            progress=progress)  # a rerun of another named model into out_dir does not resume
    info.pop("lines", None)
    if judge:
        log.info(info["outcome"]["line"])
    return new, info


def evaluate(model, tokenizer, task: Task, *, batch_size: int = 32, max_new_tokens: int | None = None,
             progress: bool = False) -> dict:
    """Every evaluation set of ``task`` on ``model``: ``forget_score``, ``retain_score``, ``utility_score``
    and per set ``<name>_em`` / ``_rouge_l`` / ``_prob`` (QA), ``_acc`` (MCQ), ``_loss`` (text); see
    docs/tasks.md. Non-finite logits raise :class:`~obliviate.errors.InvalidResult`, never a score."""
    _check_task("evaluate", task)
    return evaluate_task(model, tokenizer, task, batch_size=batch_size, max_new_tokens=max_new_tokens,
                         progress=progress)


def attack(model, tokenizer, task: Task, *, base_model=None, attacks: str | Sequence[str] | None = None,
           progress: bool = False, **config: Any) -> dict:
    """Every attack ``task`` has data for, on ``model`` (never modified): relearning on disjoint halves of the
    forget facts and on the related corpus (best of an lr grid and LoRA, for the attacker), the linear probe,
    membership inference and the recovery cost. ``attacks``: the attacks to run instead, by the names of
    ``obliviate attack --attacks`` (``"quantize,ablate"``, ``["logit_lens"]``, ``"all"``). ``base_model`` sets
    the target of ``*_steps_to_base``. ``config``: keys of
    :class:`~obliviate.evidence.harness.TaskAttackConfig`, e.g. ``lr_grid=[1e-4]``, ``lora=False``,
    ``relearn={"steps": 20}`` (an attack's section, by its name), ``probe=False`` (an attack off), ``seed=1``.
    The run of ``obliviate attack`` without a negative control
    (:func:`obliviate.pipelines.attack.run_attack`): the probe and MIA figures are labelled uncalibrated
    (``probe_calibrated``, ``mia_calibrated``). Returns the metrics, with the run's ``cost`` (each stage's
    forward and backward passes, tokens and wall seconds, their total and ``wall_seconds``:
    :mod:`obliviate.runs.cost`, what ``obliviate attack`` writes to ``results.json``)."""
    _check_task("attack", task)
    if attacks is not None:
        config = {**config, "select": attack_names(attacks)}
    acfg = from_dict(TaskAttackConfig, config, prefix="attack")
    models = {"<model>": (model, tokenizer), "<base>": (base_model, tokenizer)}
    res = run_attack(task, AttackRunConfig(seed=acfg.seed, attacks=acfg), model="<model>",
                     load=models.__getitem__,
                     base="<base>" if base_model is not None else None, progress=progress)
    return {**res["metrics"], "cost": res["cost"]}


def compare(model, tokenizer, task: Task, out: str | Path, *, methods: str | Sequence[str] | None = None,
            oracle=None, base_untrained: str | Path | None = None, control: str | None = None, seed: int = 0,
            attacks: str | Sequence[str] | dict | None = None, allow_hub: bool = False,
            progress: bool = False,
            **config: Any) -> dict:
    """The four baselines (GradDiff, NPO, SimNPO, RMU; or ``methods``: names, ``"npo,rmu"``, or ``"all"``) on
    ``model``, each from a fresh copy, against the controls: the ``oracle`` (a model that never saw the forget
    data) and a positive control built here. Without ``oracle``, as ``obliviate compare`` does, the oracle is
    built: the model before it was taught the task (``base_untrained``, a directory; else the ``obliviate
    finetune`` input that the model cards of ``model.name_or_path`` name, checked before anything is written:
    a card naming a model that cannot be found is one error naming the card; a hub id there is taken from the
    local hub cache, or with ``allow_hub`` from the hub) fine-tuned on the retain data only, kept in the cache
    of the controls shared by every run (:mod:`obliviate.runs.cache`; ``cache=False``: under ``out``) and
    placed at ``out/models/oracle_retain``; ``control="none"`` builds none (then no verdict),
    ``control="retain-finetune"`` requires it. Writes ``report.md`` / ``report.html``, per-method results and
    ``results.json`` under ``out`` (a rerun resumes). ``attacks``: names as for :func:`attack`
    (``"quantize,ablate"``, ``"all"``), or a mapping of :class:`~obliviate.evidence.harness.TaskAttackConfig`
    keys. ``config``: keys of :class:`~obliviate.pipelines.compare.run.CompareConfig` (``runs``, ...). The run
    of ``obliviate compare`` (:func:`obliviate.pipelines.compare.run.run_compare_dir`). Returns ``{"metrics",
    "curves", "configs", "timings", "robustness", ...}``."""
    _check_task("compare", task)
    # as the command's
    cfg = compare_settings(seed, methods=methods, on_a_model=True, attacks=attacks, given=config)
    given = getattr(model, "name_or_path", None)
    # a directory: its cards name the untaught model
    name = str(given) if given and Path(given).is_dir() else "<base>"
    untaught = retain_control_input(name, oracle="<oracle>" if oracle is not None else None, control=control,
                                    base_untrained=None if base_untrained is None else str(base_untrained),
                                    allow_hub=allow_hub)
    plan = compare_plan(cfg, task, name, untaught, oracle="<oracle>" if oracle is not None else None,
                        control=control, model_size=param_count(model, non_embedding=False), progress=progress)
    models = {name: (model, tokenizer), "<oracle>": (oracle, tokenizer)}
    p = next(model.parameters())

    def load_untaught(path):  # on the model's device, in its dtype, with its tokenizer
        return load_model(path, dtype=p.dtype, device=p.device), tokenizer

    return run_compare_dir(task, plan, out, load=models.__getitem__, load_control=load_untaught)


__all__ = ["attack", "compare", "evaluate", "finetune", "load_task", "unlearn"]
