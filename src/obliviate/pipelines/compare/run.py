"""Compare unlearning methods on one task, against the controls, under the one attack suite.

``obliviate compare --task T`` runs :func:`run_compare`; ``obliviate demo`` is the same call on the world
with :data:`DEMO` (docs/evaluation.md says what every number means).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType

from obliviate.attacks.relearn import n_params
from obliviate.attacks.relearn_disjoint import add_learning_ratios
from obliviate.config import build_config, deep_merge, to_dict
from obliviate.errors import ConfigError, DataError, ModelError
from obliviate.eval.oracle import oracle_distance, oracle_reference
from obliviate.eval.outcome import unlearn_outcome
from obliviate.eval.suite import evaluate_task, score_against
from obliviate.evidence.attack_table import enabled_in
from obliviate.evidence.harness import (TaskAttackConfig, attack_names, check_attackable, enabled_attacks,
                                        not_run_line, run_task_attacks, skipped_attacks)
from obliviate.evidence.positive_controls import attack_items, build_positive_control, positive_controls
from obliviate.evidence.retain_control import has_retain_data
from obliviate.evidence.trust import metric_trust
from obliviate.evidence.verdict import KNOWN_REMOVED, REFERENCES, robustness_summary
from obliviate.methods import METHODS, PRESETS, method_names, preset_name, resolve_method
from obliviate.models.builders import TinyModelConfig, build_tiny_model, tiny_param_count
from obliviate.models.layers import ResumablePasses, count_passes
from obliviate.models.load import load_model, load_tokenizer, save_model
from obliviate.pipelines.compare import muse_runs as muse
from obliviate.pipelines.compare.oracle import build_oracle, missing_oracle
from obliviate.pipelines.compare.report import ATTACK_CURVES, write_report
from obliviate.pipelines.tune.committed import tuned_run
from obliviate.pipelines.tune.run import TuneConfig, trial_config, tune, validation_split
from obliviate.runs.cache import (ControlCache, control_cache, model_digest, place_model, settings_key,
                                  task_fingerprint, tokenizer_digest)
from obliviate.runs.cost import PASS_KEYS, CostRecord, made_by, pass_flops, pass_tokens, removal_shares, stage_record
from obliviate.runs.parts import cached_parts, kept_part
from obliviate.runs.results import prepare_out_dir, stored_form, write_results
from obliviate.tasks.base import PreferredAnswers, Task
from obliviate.train.distributed import barrier, is_main_process, save_trained, two_at_a_time
from obliviate.train.finetune import FinetuneConfig, finetune, training_data
from obliviate.train.pretrain import PretrainConfig, cached_pretrain_all, pretrain_param_count, world_for
from obliviate.unlearning.engine import UnlearnConfig, check_unused_runs, method_run_config, unlearn
from obliviate.utils import run_write_path, seed_everything

log = logging.getLogger(__name__)


@dataclass
class CompareConfig:
    seed: int = 0
    methods: list[str] | None = None
    """Methods to compare (default: every registered method that can run on the task)."""
    runs: dict = field(default_factory=dict)
    """Per-method settings, the keys of ``obliviate unlearn``'s ``unlearn.*``: ``runs.npo.train.lr=5e-4``,
    ``runs.rmu.params.coef=10``, ``runs.npo.batch_size=8``."""
    attacks: TaskAttackConfig = field(default_factory=lambda: compare_attacks())
    """The attack table's ``default``, ``demo`` and ``compare`` rows: every attack but the optimised suffix
    and prefix (:func:`compare_attacks`; ``--attacks all`` adds them)."""
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    """How the base model and the oracle are pretrained, on a task that has a world (``Task.pretrain``)."""
    parallel: bool = True
    """Two at a time, one torch thread each (a second process): the base model's and the oracle's pretraining,
    then the attacks on the oracle and the base model, and the controls and methods (built, evaluated and
    attacked; :func:`obliviate.runs.parts.cached_parts`). Only on the CPU, in one process, for models of at
    most :data:`PARALLEL_MAX_PARAMS` parameters; on 2 cores it nearly halves the wall time of tiny models,
    whose small matrix products do not use a second thread."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """The tiny model trained from scratch when no ``--model`` is given (tasks without a world)."""
    oracle: bool = True
    """Build (no ``--model``) an oracle that never saw the forget data: the negative control."""
    known_removed: bool = True
    """On a task pretrained on its world, with ``oracle``: also pretrain the models known to have removed,
    judged as methods (:data:`obliviate.evidence.verdict.KNOWN_REMOVED`): the second oracle and the filtered
    model."""
    pretrained: dict = field(default_factory=dict)
    """On a task pretrained on its world: more models pretrained beside the base model, each judged as a method
    (evaluated, attacked, a verdict; kept in ``models/<name>``, its part in ``known/<name>.json``):
    ``{name: settings}``, the :class:`~obliviate.train.pretrain.PretrainConfig` keys changed from ``pretrain``'s,
    e.g. ``{"sgtm": {"route_splits": ["forget"]}, "filtered_noise30": {"mask_splits": ["forget"],
    "label_noise": 0.3}}`` (:func:`pretrained_variant`; ``scripts/sgtm_vs_filtering.py``). None by default (nor
    in the demo: each is a whole pretraining run)."""
    positive_control: bool = True
    """Build and attack a model known to only suppress
    (:func:`obliviate.evidence.controls.suppression_control`)."""
    positive_control_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.evidence.controls.suppression_control` (``max_steps``,
    ``lr``)."""
    small_norm_control: bool = True
    """With ``positive_control``, also build and attack the small-norm suppression control
    (``positive_control_smallnorm``, :func:`obliviate.evidence.controls.small_norm_control`), which calibrates
    quantization."""
    small_norm_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.evidence.controls.small_norm_control` (``lr``, ``chunk``,
    ``max_steps``, ``target``)."""
    save_models: bool = True
    """Keep every method's unlearned model in ``out/methods/<name>/model``."""
    eval_batch_size: int = 32
    tune: bool = False
    """Run each method at settings chosen for this base model (``compare --tune``,
    :mod:`obliviate.pipelines.tune`): on a validation split of the forget and retain pairs; every model is
    then scored on the other items only."""
    tuning: TuneConfig = field(default_factory=lambda: TuneConfig(extend=0))
    """The grid, budget, constraint and split of ``tune`` (``tuning.budget=6``): each method's own search
    space, 24 trials, none past the grid's edge, so that every method gets the same budget."""
    tuned: bool = False
    """Run each method at the settings tuned for it on the world and committed beside it
    (``compare --tuned``, :mod:`obliviate.pipelines.tune.committed`, ``scripts/tune_all.py``), under the
    ``runs.<name>`` given; a method without them for the model's preset runs at its preset (results.json's
    ``tuned`` says which did)."""
    tuned_dir: str | None = field(default=None, metadata={"input_path": True})
    """Where ``tuned`` reads them (default: ``obliviate/methods/tuned``)."""
    muse_folds: bool = True
    """On a MUSE task, also run each method over MUSE's scalability folds and sustainability requests
    (``scal/``, ``sust/``; :mod:`obliviate.pipelines.compare.muse_runs`)."""
    cache: bool = True
    """Keep the oracle built beside a user's model, the attacks on the oracle and the base model, and the
    positive controls (made and attacked) in the cache shared by every run directory
    (:mod:`obliviate.runs.cache`), and reuse them: a second comparison on the same base model runs only its
    methods. ``--no-cache`` (``cache=false``) makes them in this run."""


PARALLEL_MAX_PARAMS = 100_000_000
"""The largest model ``compare`` works on two at a time (each process holds its own copy of a model being
unlearned)."""


def compare_attacks() -> TaskAttackConfig:
    """The attacks ``compare`` runs unless told: the attack table's rows that run in ``compare``
    (:func:`~obliviate.evidence.attack_table.enabled_in`), every attack but GCG's suffix and prefix."""
    return TaskAttackConfig(enabled=dict.fromkeys(enabled_in("compare"), True))


DEMO = {"methods": ["graddiff", "npo", "simnpo", "rmu"],
        "attacks": {"lr_grid": [3e-4], "relearn": {"lr_grid": [1e-3]}, "lora": False,
                    **{n: False for n in enabled_in("compare") if n not in enabled_in("demo")}}}
"""What ``obliviate demo`` changes in :class:`CompareConfig`: the four baselines, one attacker setting per
relearning attack (no LoRA), and of the attacks only those of the attack table's ``default`` and ``demo`` rows
(the cheap newer ones: quantization, direction ablation, logit lens, in-context), which keeps the demo within
minutes; ``compare`` tries the whole grid and every attack but GCG's suffix and prefix (docs/evaluation.md,
"More attacks", gives each one's cost)."""


BASELINES = DEMO["methods"]
"""``compare``'s methods on a user's model (``--model``, and the API) unless told otherwise: the four
baselines, as the demo runs them (every method, ``--methods all``, took 643 s on a 3-layer toy model: days on
a 7B)."""


def methods_option(text: str | None, *, on_a_model: bool) -> list[str] | None:
    """The methods ``compare --methods a,b`` names (any case: :func:`~obliviate.methods.resolve_method`;
    ``all``: every registered method); without the flag, :data:`BASELINES` on a user's model, else None (the
    config decides, every method by default)."""
    if text is None:
        return list(BASELINES) if on_a_model else None
    if text.strip().lower() == "all":
        return method_names()
    names = [n for n in (s.strip() for s in text.split(",")) if n]
    if not names:
        raise ConfigError(f"--methods {text!r}: give method names separated by commas, or 'all'")
    return [resolve_method(n) for n in names]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def plan_lines(cfg: "CompareConfig", task: Task, methods: Sequence[str] | None = None,
               skipped: Mapping[str, str] | None = None) -> list[str]:
    """The lines a comparison starts with, before any model: how many methods and attacks it will run, then
    one line for each method or attack asked for that will not run, with its reason
    (:func:`skipped_methods`, :func:`~obliviate.evidence.harness.skipped_attacks`). ``methods``, ``skipped``:
    the plan's (:class:`ComparePlan`), where known."""
    methods = compared_methods(cfg) if methods is None else methods
    skipped = skipped_methods(cfg, task, methods) if skipped is None else skipped
    running = [m for m in methods if m not in skipped]
    attacks = list(enabled_attacks(task, cfg.attacks))  # in the order they run
    not_attacked = skipped_attacks(task, cfg.attacks)
    asked = (f" of {len(methods)} asked for" if skipped else "")
    line = (f"compare: {_count(len(running), 'method')}{asked} ({', '.join(running) or 'none'}) and "
            f"{_count(len(attacks), 'attack')} ({', '.join(attacks) or 'none'}) on {task.name}")
    return [line, *(not_run_line("method", n, why) for n, why in skipped.items()),
            *(not_run_line("attack", n, why) for n, why in not_attacked.items())]


def skipped_methods(cfg: "CompareConfig", task: Task, methods: list[str] | None = None,
                    runs: Mapping[str, "MethodRun"] | None = None) -> dict[str, str]:
    """``{name: why}`` of the compared methods (``methods``, else :func:`compared_methods`) that cannot run
    on ``task`` as configured (:func:`skip_reason`), known from the inputs before any model (a method's own
    params: its run in ``runs``, :func:`method_runs`'; without them, read at the tiny preset)."""
    out = {}
    for name in compared_methods(cfg) if methods is None else methods:
        ucfg = runs[name].config if runs is not None else method_run_config(name, cfg.runs.get(name), "tiny",
                                                                              cfg.seed)[0]
        why = skip_reason(task, name, ucfg.params)
        if why is not None:
            out[name] = why
    return out


def compared_methods(cfg: "CompareConfig") -> list[str]:
    """The methods a comparison considers: ``cfg.methods``, else every registered method (those that cannot
    run on the task are listed as skipped, with their reason: :func:`skip_reason`)."""
    return list(cfg.methods) if cfg.methods is not None else method_names()


def skip_reason(task: Task, name: str, params: dict | None = None) -> str | None:
    """Why method ``name`` (its ``params``) cannot run as it should on ``task`` (None: it can): an IdK method
    needs forget QA pairs, DPO preference data, a method with
    :attr:`~obliviate.unlearning.contract.Method.compare_needs` those config keys set. A comparison lists such
    a method as skipped with this line rather than run it on a stand-in."""
    cls = METHODS[name]
    if getattr(cls, "needs_idk", False) and task.forget.docs:
        return ("needs forget QA pairs (it pairs each forget question with a preferred answer); the forget "
                f"data holds {len(task.forget.docs)} documents")
    if cls.needs_preference_data and not isinstance(task.idk, PreferredAnswers):
        return ("needs preference data (a chosen answer for each forget QA pair: a forget file with `chosen` "
                "and `rejected` fields); the task has none")
    unset = [k for k in cls.compare_needs if not (params or {}).get(k)]
    if unset:
        what = ", ".join(f"`runs.{name}.params.{k}` ({cls.compare_needs[k]})" for k in unset)
        return f"needs {what}; without them it would fit on a stand-in (its first training batch)"
    return None


def check_retain(task: Task, methods: list[str], model_dir: str | None) -> None:
    """A one-line :class:`DataError` when ``task`` has no retain data but the comparison needs it (any
    method's retain term; the tiny base model's training without ``model_dir``), naming every file the task
    found missing."""
    if not task.retain and (methods or model_dir is None):
        missing = "".join(f"; {x}" for x in task.meta.get("missing") or [])
        raise DataError(f"task {task.name!r} has no retain data, which every method's retain term (and the "
                        f"tiny base model's training) needs{missing}")


def edit_note(summary: dict) -> dict:
    """What an edit method's run says it did, for the report (``n_edited``: EMBER's edited token rows), its
    scalar entries only."""
    info = summary.get("edit") or {}
    return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool)) and k != "method"}


def method_config(cfg: CompareConfig, name: str, preset: str) -> tuple[UnlearnConfig, dict]:
    """Method ``name``'s run: its ``preset``, then (``cfg.tuned``) its committed tuned settings
    (:func:`~obliviate.pipelines.tune.committed.tuned_run`), then ``cfg.runs[name]``."""
    run = method_runs(cfg, [name], preset)[name]
    return run.config, run.settings


@dataclass(frozen=True)
class MethodRun:
    """One compared method's run, built once (:func:`method_runs`)."""

    config: UnlearnConfig
    """What :func:`~obliviate.unlearning.engine.unlearn` runs (a copy of it: the plan's stays as built)."""
    settings: dict
    """The settings the report shows."""
    tuned: dict | None = None
    """With ``cfg.tuned``: where its committed tuned settings came from (results.json's ``tuned``)."""


def method_runs(cfg: CompareConfig, methods: Sequence[str], preset: str) -> dict[str, MethodRun]:
    """Each of ``methods``' run at ``preset`` (the base model's size: :func:`base_presets`): the preset's
    defaults, then (``cfg.tuned``) the method's committed tuned settings
    (:func:`~obliviate.pipelines.tune.committed.tuned_run`), then ``cfg.runs[name]``; checked as it is built,
    every key named in its error."""
    out = {}
    for name in methods:
        run, tuned = cfg.runs.get(name), None
        if cfg.tuned and METHODS[name].kind != "edit":
            run, tuned = tuned_run(name, preset, run, cfg.tuned_dir)
        ucfg, settings = method_run_config(name, run, preset, cfg.seed)
        out[name] = MethodRun(ucfg, settings, tuned)
    return out


def base_presets(model: str | None, model_size: int | None, pretraining: Mapping[str, PretrainConfig],
                 tiny: TinyModelConfig) -> list[str]:
    """The methods' presets (:func:`~obliviate.methods.preset_name`) the comparison's base model may pick,
    before it exists: that of a given model's ``model_size`` (None, unknown: every preset, the loaded model
    picks), of the world model the plan pretrains (its vocabulary counted at its configured size, which its
    tokenizer may miss by a few ids: both presets near the threshold), or of the ``tiny`` model trained on
    another task."""
    if model is not None:
        return [preset_name(model_size)] if model_size is not None else list(PRESETS)
    n = pretrain_param_count(pretraining["base"]) if "base" in pretraining else tiny_param_count(tiny)
    return sorted({preset_name(int(n * 0.99)), preset_name(int(n * 1.01))}, key=PRESETS.index)


def data_fingerprint(task: Task) -> str:
    """A hash of the task's forget and retain data and of its evaluation items (a file edited in place changes
    it)."""
    h = hashlib.sha256()
    for part in (task.forget.qa, task.forget.docs, task.retain.qa, task.retain.docs, task.relearn or []):
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
    for es in task.evals:
        h.update(json.dumps([es.name, es.role, es.kind, [dict(x) if isinstance(x, dict) else x.to_dict()
                                                         for x in es.items]], sort_keys=True,
                                                         default=str).encode())
    return h.hexdigest()[:16]


def task_texts(task: Task) -> list[str]:
    """Every text of a task, for training a tokenizer that covers it."""
    texts = [f"{task.prompt.prompt(q)}{task.prompt.answer(a)}" for d in (task.forget, task.retain) for q,
             a in d.qa]
    texts += list(task.forget.docs) + list(task.retain.docs) + list(task.relearn or [])
    for es in task.evals:
        for x in es.items:
            texts += [x[k] for k in ("question", "answer", "text") if k in x and isinstance(x[k], str)]
            texts += list(x["choices"]) if "choices" in x else []
    return texts


def _made_by(d: Path, source) -> bool:
    """Whether model directory ``d`` is complete and was made from ``source`` (its ``DONE`` file holds it)."""
    done = d / "DONE"
    return done.is_file() and (d / "config.json").exists() and done.read_text() == json.dumps(source, sort_keys=True)


def _copy_model(src: Path, dst: Path) -> None:
    """Copy a cached model directory into the run (rank 0; kept if it is already the copy of ``src``); every
    process waits."""
    run_write_path(dst)  # no link under --out is followed (nor removed in its target's place)
    if is_main_process() and not _made_by(dst, str(src)):
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, tmp)
        (tmp / "DONE").write_text(json.dumps(str(src), sort_keys=True))
        tmp.rename(dst)
    barrier()


SECOND_ORACLE_SEED = 1
"""The second oracle's pretraining seed is the oracle's plus this (the same world, another initialisation and
data order)."""


PRETRAINED_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
"""What a name of :attr:`CompareConfig.pretrained` may be (it names a folder and a report row)."""


def pretrained_variant(pretrain: PretrainConfig, name: str, settings) -> PretrainConfig:
    """The pretraining of :attr:`CompareConfig.pretrained`'s model ``name``: ``pretrain`` with ``settings``
    (``PretrainConfig`` keys) changed; a one-line ConfigError for a name that is taken or not a plain name, or
    settings that are not a valid pretraining."""
    taken = {"base", "oracle", *KNOWN_REMOVED, *REFERENCES, *method_names()}
    if not isinstance(name, str) or not PRETRAINED_NAME.match(name) or name in taken:
        raise ConfigError(f"config key 'pretrained': {name!r} is not a free model name (a letter, then letters, "
                          "digits, '_', '.', '-'; not base, oracle, a control's, a known model's or a method's)")
    if not isinstance(settings, dict):
        raise ConfigError(f"config key 'pretrained.{name}': must be a mapping of pretraining settings, got "
                          f"{type(settings).__name__}")
    try:
        return build_config(PretrainConfig, base=deep_merge(to_dict(pretrain), settings))
    except ConfigError as e:
        raise ConfigError(f"config key 'pretrained.{name}': {e}") from None


def world_pretraining(task: Task, cfg: CompareConfig) -> dict[str, PretrainConfig]:
    """The pretraining of every model a comparison pretrains on the task's world: the base model and
    (``cfg.oracle``) the oracle, without the world's forget split, and (``cfg.known_removed``) the second
    oracle (another pretraining seed) and the filtered model (the whole corpus, the forget split's tokens
    loss-masked: ``PretrainConfig.mask_splits``), then ``cfg.pretrained``'s (:func:`pretrained_variant`)."""
    pcfg = dataclasses.replace(cfg.pretrain, world=task.pretrain)
    cfgs = {"base": pcfg}
    if cfg.oracle:
        cfgs["oracle"] = copy.deepcopy(pcfg)
        cfgs["oracle"].exclude_splits = sorted(set(pcfg.exclude_splits) | {"forget"})
        if cfg.known_removed:
            cfgs["second_oracle"] = dataclasses.replace(copy.deepcopy(cfgs["oracle"]),
                                                        seed=pcfg.seed + SECOND_ORACLE_SEED)
            cfgs["filtered"] = copy.deepcopy(pcfg)
            cfgs["filtered"].mask_splits = sorted(set(pcfg.mask_splits) | {"forget"})
    for name, settings in cfg.pretrained.items():
        cfgs[name] = pretrained_variant(pcfg, name, settings)
    return cfgs


def pretrained_bases(plan: "ComparePlan", out: Path) -> tuple[dict[str, str], Path]:
    """The models of the plan's pretraining (:func:`world_pretraining`), cached across runs and copied into
    ``out/models``, two at a time. Returns the directories and the base model's cache entry (its training
    log)."""
    cfgs = plan.pretraining
    world_for(cfgs["base"]).save(out / "world")
    roots = dict(zip(cfgs, cached_pretrain_all(list(cfgs.values()), plan.progress, parallel=plan.cfg.parallel)))
    dirs = {}
    for name, root in roots.items():
        _copy_model(root / "model", out / "models" / name)
        # its pretraining cost (a known model's cost)
        if is_main_process() and (root / "pretrain.json").exists():
            shutil.copyfile(root / "pretrain.json", out / "models" / name / "pretrain.json")
        dirs[name] = str(out / "models" / name)
    return dirs, roots["base"]


def note_data_change(out: Path, data: str) -> bool:
    """Say in one line (stderr) when ``out`` holds finished parts made from other data than the task's now (an
    edited forget or retain file of the same size, rerun into the same ``--out``): they are not reused, and
    the run starts afresh. Returns whether it said so."""
    for part in sorted(Path(out).glob("methods/*/result.json")) + sorted(Path(out).glob("controls/*.json")):
        try:
            old = (json.loads(part.read_text()).get("key") or {}).get("data")
        except (OSError, ValueError, AttributeError):
            continue
        if old is not None and old != data:
            log.warning("%s: the task's data changed since its parts were made (another forget, retain or "
                        "evaluation file content); starting afresh", out)
            return True
    return False


def tiny_bases(task: Task, cfg: CompareConfig, out: Path, progress: bool) -> dict[str, str]:
    """Train the tiny base (forget + retain) and, with ``cfg.oracle``, the oracle (retain only); kept in
    ``out/models``."""
    dirs = {"base": out / "models" / "base"}
    if cfg.oracle:
        dirs["oracle"] = out / "models" / "oracle"
    tok = None
    for name, d in dirs.items():
        source = {"model": name, "tiny": to_dict(cfg.tiny), "finetune": to_dict(cfg.finetune),
                  "seed": cfg.seed,
                  "task": task.summary(), "data": data_fingerprint(task)}
        if _made_by(run_write_path(d), source):
            continue
        seed_everything(cfg.seed)
        model, tok = build_tiny_model(task_texts(task) if tok is None else tok, cfg.tiny, seed=cfg.seed)
        data = training_data(task, "both" if name == "base" else "retain")
        # its pretraining, from scratch (a resumed run: the checkpoint's passes carried over)
        with count_passes(model) as passes:
            carried = ResumablePasses(passes)
            model, summary = finetune(model, tok, data, cfg.finetune, out / "train" / name, prompt=task.prompt,
                                      preset="tiny", progress=progress, resume=True, state_hooks=carried.hooks)
        save_model(model, d)
        tok.save_pretrained(str(d))
        resumed = summary.get("resumed_from", 0)
        (d / "pretrain.json").write_text(json.dumps({"passes": dict(passes), "resumed_from": resumed,
                                                     "passes_whole_run": carried.whole_run(resumed)}, indent=2))
        (d / "DONE").write_text(json.dumps(source, sort_keys=True))
    return {k: str(v) for k, v in dirs.items()}


def oracle_pretraining(oracle_dir: str | None, *, given: bool) -> dict | None:
    """What training the oracle cost, where it is known: the ``pretrain.json`` beside its model (the
    world's pretraining, or the tiny oracle trained from scratch on the task's retain data); ``given``: a
    user's model, whose oracle (``--oracle DIR``) obliviate did not train. None without an oracle or a
    record of it."""
    if not oracle_dir:
        return None
    info = _pretrain_record(Path(oracle_dir) / "pretrain.json")
    if info is None or not info.get("passes"):
        return {"passes": None, "what": "unknown: the oracle was given "
                                        "(--oracle) and records no pretrain.json"
                if given else "unknown: the oracle records no pretrain.json"}
    passes, why = whole_run_passes(info)
    if passes is None:
        return {"passes": None, "what": f"unknown: the oracle's pretraining {why}"}
    return {"passes": passes, "what": "the oracle's pretraining (pretrain.json beside it)"}


UNLEARNING = "its unlearning: every forward and backward pass through the model and the copies it made"
"""What a method's ``cost.removal`` counts."""


def removal_costs(stages: dict, methods, dirs: dict, pretraining: dict | None, n: int) -> dict:
    """``{model: made_by(...)}`` (:func:`~obliviate.runs.cost.made_by`): what making each model compare judges
    cost, in forward+backward tokens and FLOPs (``n`` parameters: the base model's, whose architecture every
    model compared shares). The oracle: its pretraining (``pretraining``, where known). Each of ``methods``: its
    unlearning, the ``unlearn:<name>`` stage of ``stages`` (what it cost when made, for one found made). Each
    other model of ``dirs`` made by a pretraining run, the ``pretrain.json`` beside it (the known-removed
    models, a pretraining-time method): that whole pretraining, plus the labelling run it records
    (``labelling``: ``{"passes", "what"}``), if any. The base model's pretraining removes nothing and is not
    one; the positive controls, built from it, are no removal either."""
    out = {}
    if pretraining and pretraining.get("passes"):
        out["oracle"] = made_by(pretraining["passes"], n, pretraining["what"], "oracle_pretraining")
    for name in methods:
        stage = stages.get(f"unlearn:{name}") or {}
        out[name] = made_by(stage.get("built") or stage or None, n, UNLEARNING, f"unlearn:{name}")
    for name, d in dirs.items():
        if name in ("base", "oracle") or name in out:
            continue
        info = _pretrain_record(Path(d) / "pretrain.json")
        if info is not None:
            passes, why = whole_run_passes(info)
            out[name] = made_by(passes, n, _pretraining_what(info) if passes else f"unknown: its pretraining {why}",
                                "pretrain.json", extra=info.get("labelling") if passes else None)
    return out


def whole_run_passes(info: dict) -> tuple[dict | None, str | None]:
    """``(passes, None)``: the passes of a whole pretraining run its ``pretrain.json`` (``info``) records; else
    ``(None, why)``: it records none, or it was resumed from a checkpoint by an obliviate that counted only the
    passes since (before ``passes_whole_run``: :class:`~obliviate.models.layers.ResumablePasses`)."""
    passes = info.get("passes")
    if not passes:
        return None, "records no passes"
    resumed = int(info.get("resumed_from") or 0)
    if resumed and not info.get("passes_whole_run"):
        return None, (f"was resumed at step {resumed}, and its pretrain.json counts only the passes since (made "
                      "before a resumed run carried its counts over)")
    return passes, None


def _pretrain_record(path: Path) -> dict | None:
    """The ``pretrain.json`` at ``path`` as a dict, None where there is none (or it is no JSON object)."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _pretraining_what(info: dict) -> str:
    """What a pretraining-made model's cost counts, in words: the pretraining, and its labels' cost."""
    what = "its whole pretraining (pretrain.json beside it)"
    lab = info.get("labelling")
    if isinstance(lab, dict):
        return f"{what}, plus its labelling: {lab.get('what') or 'the labeller run it records'}"
    if info.get("masked_tokens"):
        return (f"{what}; its {int(info['masked_tokens']):,} loss-masked tokens were chosen by the world's token "
                "labels, which cost no pass")
    return what


def run_compare(task: Task, plan: "ComparePlan", out: Path, *, oracle_dir: str | None = None, load=None,
                cost: CostRecord | None = None,
                oracle_training: dict | None = None, store: ControlCache | None = ...) -> dict:
    """Every method of ``plan`` (:func:`compare_plan`'s: read here, not checked again) on ``task``, beside the
    base model and the controls; the report in ``out``.

    The base model is ``plan.model``; without one it is pretrained on the task's world (the plan's
    pretraining) or, for other tasks, a tiny model fine-tuned on the task, with an oracle built the same way
    without the forget data (``oracle_dir``, default ``plan.oracle``, names one beside ``plan.model``). Every
    model is evaluated and attacked once, each a part kept under ``out`` (``methods/<name>/``, ``controls/``,
    ``known/``, ``attacks/``), so an interrupted comparison resumes. ``load(path) -> (model, tokenizer)``
    loads a model directory (the command passes its device and dtype). Returns ``metrics``, ``curves``,
    ``configs``, ``timings``, ``model_dirs``, ``robustness``, ``trust``
    (:func:`~obliviate.evidence.trust.metric_trust`) and ``cost`` (:class:`~obliviate.runs.cost.CostRecord`'s,
    into ``cost`` when given, with the oracle's pretraining, ``oracle_training`` where the caller built the
    oracle, and each method's share of it).

    With ``cfg.cache`` the attacks on the oracle and the base model and the positive controls (made and
    attacked) are parts of the cache of the controls shared by every run directory
    (:mod:`obliviate.runs.cache`), by the weights of the base model and the oracle, the task and the settings:
    ``store``, the run's one (None: none), the plan's when not given.
    """
    load = load or (lambda p: (load_model(p), load_tokenizer(p)))
    cfg, model_dir, progress = plan.cfg, plan.model, plan.progress
    oracle_dir = plan.oracle if oracle_dir is None else oracle_dir
    t0 = time.time()
    cost = cost if cost is not None else CostRecord()
    dirs, base_root = _bases(task, plan, out, oracle_dir)
    base_model, tok = load(dirs["base"])
    preset = preset_name(base_model)
    if preset not in plan.runs:  # a size the plan read wrong: said before any model is scored
        raise ModelError(f"the base model {dirs['base']!r} picks the {preset!r} preset by its size, but its size "
                         f"read before loading picked {', '.join(plan.runs)}")
    # pretraining or fine-tuning the bases (0: cached or given)
    timings: dict = {"bases_seconds": time.time() - t0}
    # their passes: each one's pretrain.json (the oracle's below)
    cost.add("bases", None, timings["bases_seconds"])
    run_key = {"seed": cfg.seed, "base": dirs["base"], "oracle": dirs.get("oracle"), "task": task.summary(),
               "data": data_fingerprint(task), "attacks": to_dict(cfg.attacks),
               "eval_batch_size": cfg.eval_batch_size,
               "tune": cfg.tune, "tuned": cfg.tuned}  # what a finished method's part must share to be reused
    note_data_change(out, run_key["data"])
    val = None
    # choose on the validation items, score every model on the others (the training data is whole)
    if cfg.tune:
        val, task = validation_split(task, cfg.tuning.val_fraction, cfg.tuning.split_seed)
    store = plan.store if store is ... else store
    run = _Scoring(task, cfg, tok, base_model, progress)
    # what every shared part reads beside its own model (run_key's paths are not: the same base model read from
    # another place makes the same parts)
    share = partial(_through_cache, store, None if store is None else {
        "task": task_fingerprint(task), "attacks": plan.attacks_key, "seed": cfg.seed,
        "eval_batch_size": cfg.eval_batch_size, "tokenizer": tokenizer_digest(tok),
        "base": model_digest(base_model)})
    here: dict = {}  # the cost stages run in this process outside the parts
    run.metrics["base"], te = run.evaluate("base", base_model, here)
    timings.update(te)
    held: dict = {}  # the oracle, taken by its part so that it is freed once attacked
    jobs = _oracle_jobs(run, dirs, load, out, run_key, share, store, held, here, timings)
    controls = _control_jobs(run, out, run_key, share)
    methods = _method_jobs(run, plan, out, run_key, preset, val)
    jobs += controls + _known_jobs(run, dirs, load, out, run_key) + methods["jobs"]
    methods["controls"] = {name for name, *_ in controls}
    parallel = (cfg.parallel and two_at_a_time() and all(p.device.type == "cpu" for p in base_model.parameters())
                and sum(p.numel() for p in base_model.parameters()) <= PARALLEL_MAX_PARAMS)
    # made by an earlier run into this --out
    kept = [kept_part(path, key) is not None for _, path, key, _ in jobs]
    parts = cached_parts([job[1:] for job in jobs], parallel=parallel, in_child=run.quiet)
    held.clear()  # the oracle, when its attacks were kept from an earlier run
    _add_costs(cost, here, jobs, parts, kept, methods["controls"])
    curves, dirs = _gather(run, jobs, parts, kept, methods, out, dirs, timings, cost, load, run_key)
    return _finish(run, out, curves, dirs, methods, timings, cost, t0, oracle_training, model_dir, base_root)


@dataclass
class _Scoring:
    """What every part of a comparison reads (the task, the settings, the base model, its tokenizer and the
    models' metrics so far), and the one way a part scores its model: evaluated, then attacked. A part is a
    function of the models and settings alone: it returns what it made (metrics, curves, timings) and writes
    nothing else, so it runs alike in this process or in the forked child of a parallel run
    (:func:`obliviate.runs.parts.cached_parts`)."""

    task: Task
    cfg: CompareConfig
    tok: object
    base_model: object
    progress: bool
    metrics: dict = field(default_factory=dict)
    # the base model's scores, computed once for every model attacked
    base_cache: dict = field(default_factory=dict)
    oracle_ref: dict | None = None  # what oracle_distance compares each model with

    def quiet(self) -> None:
        """The second process of a parallel run draws no progress bars."""
        self.progress = False

    def evaluate(self, name: str, model, costs: dict) -> tuple[dict, dict]:
        """(metrics, timings) of ``model``, scored against the base model's metrics (but the base model's
        own); its cost stage goes to ``costs``."""
        t = time.time()
        with count_passes(model) as passes:
            m = evaluate_task(model, self.tok, self.task, batch_size=self.cfg.eval_batch_size,
                              progress=self.progress)
            # MUSE's six-way
            m.update(muse.model_metrics(self.task, model, self.tok, self.cfg.eval_batch_size))
        if name != "base":
            m.update(score_against(self.metrics["base"], m))
        costs[f"evaluate:{name}"] = stage_record(passes, time.time() - t)
        return m, {f"{name}_eval_seconds": time.time() - t}

    def attack(self, name: str, model, m: dict, costs: dict) -> tuple[dict, dict, dict]:
        """(metrics ``m`` with every attack's, the relearning curves, timings) of ``model``; each attack's
        cost stage goes to ``costs``."""
        t = time.time()
        per: dict = {}
        spent: dict = {}
        att = run_task_attacks(model, self.tok, self.task, self.cfg.attacks, base_model=self.base_model,
                               metrics=m,
                               base_cache=self.base_cache, timings=per, costs=spent)
        costs.update({f"attack:{name}:{k}": rec for k, rec in spent.items()})
        curve = {k: att[f"{k}_curve"] for k in ATTACK_CURVES if f"{k}_curve" in att}
        return {**m, **att}, curve, {f"{name}_attack_seconds": time.time() - t,
                                     f"{name}_seconds_by_attack": per}

    def scored(self, name: str, model, m: dict | None = None, before: dict | None = None,
               costs: dict | None = None) -> dict:
        """The part of a model: evaluated (unless ``m`` is given), then attacked; ``before``: timings of
        its making, ``costs``: the cost stages of its making (the part returns them with its own under
        ``cost``)."""
        t: dict = dict(before or {})
        costs = {} if costs is None else costs
        if m is None:
            m, te = self.evaluate(name, model, costs)
            t.update(te)
        m, curve, ta = self.attack(name, model, m, costs)
        return {"metrics": m, "curves": curve, "timings": {**t, **ta}, "cost": costs}

    def with_oracle_distance(self, model, m: dict) -> dict:
        """``m`` with the distance to the oracle's answers (:func:`~obliviate.eval.oracle.oracle_distance`),
        where there is an oracle."""
        if self.oracle_ref is not None:
            m.update(oracle_distance(model, self.tok, self.task, self.oracle_ref, m["forget_score"]))
        return m


def _bases(task: Task, plan: "ComparePlan", out: Path, oracle_dir: str | None) -> tuple[dict, Path | None]:
    """The base model's and the oracle's directories (given, pretrained on the task's world or tiny models
    trained on the task) and the base model's pretraining cache entry (its training log), None where it was
    not pretrained."""
    if plan.model is not None:
        return {"base": plan.model, **({"oracle": oracle_dir} if oracle_dir else {})}, None
    if plan.pretraining:
        return pretrained_bases(plan, out)
    return tiny_bases(task, plan.cfg, out, plan.progress), None


def _through_cache(store: ControlCache | None, shared_key: dict | None, what: str, ident: dict, fn,
                   place: Path | None = None):
    """The part ``fn`` (``fn(folder)``: ``folder`` receives the files it keeps, its ``model/``) through the
    cache of the controls (:mod:`obliviate.runs.cache`), where the run uses it: made once for every comparison
    on the same base model, task and settings, whatever its ``--out``; the model of a control kept there is
    linked at ``place``."""
    if store is None:
        return partial(fn, None)
    return partial(_cached_part, store, {**shared_key, **ident}, fn, what, place)


def _cached_part(store: ControlCache, key: dict, fn, what: str, place: Path | None) -> dict:
    hit = store.get("compare-part", key, fn, what=what)
    if place is not None and "metrics" in hit:
        place_model(hit.path / "model", place)
    return {**hit, "shared": {"entry": str(hit.path), "reused": hit.reused}}


def _oracle_scores(run: _Scoring, oracle, _folder=None) -> dict:
    """The oracle's evaluation and what oracle_distance compares each model with (a part of the cache)."""
    costs: dict = {}
    m, te = run.evaluate("oracle", oracle, costs)
    ref = None if m.get("forget_score") is None else oracle_reference(oracle, run.tok, run.task,
                                                                      m["forget_score"])
    if ref is not None and ref["truth_ratios"] is not None:
        ref["truth_ratios"] = [float(x) for x in ref["truth_ratios"]]  # as stored, with the cache or not
    return {"metrics": m, "timings": te, "ref": ref, "cost": costs}


def _attacked(run: _Scoring, name: str, held: dict, _folder=None) -> dict:
    """The attacks on the model ``held[name]`` (taken, so that it is freed once attacked), evaluated
    already."""
    return run.scored(name, held.pop(name), run.metrics[name])


def _oracle_jobs(run: _Scoring, dirs: dict, load, out: Path, run_key: dict, share, store, held: dict,
                 here: dict,
                 timings: dict) -> list:
    """The oracle evaluated now (its scores are what every model is compared with), then the parts of the
    attacks on the oracle and on the base model."""
    jobs = []
    if "oracle" in dirs:
        oracle, oracle_tok = load(dirs["oracle"])
        check_same_vocabulary(run.tok, oracle_tok, dirs["base"], dirs["oracle"])
        oracle_id = {"part": "oracle", "oracle": None if store is None else model_digest(oracle)}
        got = stored_form(share("the oracle's evaluation", {**oracle_id, "part": "oracle-scores"},
                                partial(_oracle_scores, run, oracle))())
        run.metrics["oracle"], run.oracle_ref = got["metrics"], got["ref"]
        timings.update(got["timings"])
        for stage, rec in got["cost"].items():
            here[stage] = {**rec, "cached": True} if (got.get("shared") or {}).get("reused") else rec
        held["oracle"] = oracle
        del oracle
        jobs.append(("oracle", out / "attacks" / "oracle.json", {"attacked": "oracle", **run_key},
                     share("the attacks on the oracle", oracle_id, partial(_attacked, run, "oracle", held))))
    jobs.append(("base", out / "attacks" / "base.json", {"attacked": "base", **run_key},
                 share("the attacks on the base model", {"part": "base"},
                       partial(_attacked, run, "base", {"base": run.base_model}))))
    return jobs


def _control_part(run: _Scoring, cname: str, build, kwargs: dict, cdir: Path, folder) -> dict:
    """A positive control built from the base model, then scored; its model kept in ``cdir`` (or
    ``folder``)."""
    t = time.time()
    with count_passes(run.base_model) as passes:  # the builder's copy of the base model is counted with it
        control, info = build_positive_control(build, run.base_model, run.tok, run.task, seed=run.cfg.seed,
                                               kwargs=kwargs, progress=run.progress)
    made = {f"build:{cname}": stage_record(passes, time.time() - t)}  # its seconds: here, not in info
    if control is None:  # e.g. a task with MCQs only: nothing to refuse
        return {"info": info, "cost": made}
    part = run.scored(cname, control, costs=made)
    # a finished control has its model
    save_trained(control, cdir if folder is None else folder / "model", run.tok)
    return {**part, "info": info}


def _control_jobs(run: _Scoring, out: Path, run_key: dict, share) -> list:
    """The parts of the positive controls
    (:func:`~obliviate.evidence.positive_controls.positive_controls`)."""
    jobs = []
    for cname, (build, kwargs) in positive_controls(run.cfg).items():
        cdir = out / "models" / cname
        if not (cdir / "config.json").exists():
            (out / "controls" / f"{cname}.json").unlink(missing_ok=True)  # a control whose model is gone
        jobs.append((cname, out / "controls" / f"{cname}.json", {"control": cname, "args": kwargs, **run_key},
                     share(f"the {cname} built from the base model", {"part": cname, "args": kwargs},
                           partial(_control_part, run, cname, build, kwargs, cdir), place=cdir)))
    return jobs


def _known_part(run: _Scoring, kname: str, kdir: str, load) -> dict:
    """A model known to have removed (pretrained with the bases), judged as a method; with its pretraining's
    passes."""
    model, ktok = load(kdir)
    if ktok.get_vocab() != run.tok.get_vocab():
        raise ModelError(f"{kdir!r} has another tokenizer than the base model")
    costs: dict = {}
    m, te = run.evaluate(kname, model, costs)
    part = run.scored(kname, model, run.with_oracle_distance(model, m), before=te, costs=costs)
    info = Path(kdir) / "pretrain.json"  # its cost: a whole pretraining run
    passes = json.loads(info.read_text()).get("passes") if info.exists() else None
    return {**part, "timings": {**part["timings"], f"{kname}_pretrain_passes": passes}}


def _known_jobs(run: _Scoring, dirs: dict, load, out: Path, run_key: dict) -> list:
    """The parts of the models known to have removed (:data:`~obliviate.evidence.verdict.KNOWN_REMOVED`)."""
    return [(kname, out / "known" / f"{kname}.json", {"known": kname, **run_key},
             partial(_known_part, run, kname, dirs[kname], load)) for kname in [*KNOWN_REMOVED, *run.cfg.pretrained]
            if kname in dirs]


def _method_part(run: _Scoring, name: str, ucfg: UnlearnConfig, mdir: Path) -> dict:
    """Method ``name`` run on a copy of the base model, then scored; its model kept in ``mdir/model``."""
    seed_everything(run.cfg.seed)
    model = copy.deepcopy(run.base_model)
    t = time.time()
    model, summary = unlearn(model, run.tok, run.task.forget, run.task.retain, ucfg, mdir / "train",
                             prompt=run.task.prompt, idk=run.task.idk, progress=run.progress, resume=False)
    made = {f"{name}_unlearn_seconds": time.time() - t,
            f"{name}_unlearn_passes": summary.get("passes")}  # forwards and backwards (none for an edit)
    costs = {f"unlearn:{name}": stage_record(summary.get("passes"), time.time() - t)}
    m, te = run.evaluate(name, model, costs)
    if edit_note(summary):
        m["edit"] = edit_note(summary)
    part = run.scored(name, model, run.with_oracle_distance(model, m), before={**made, **te}, costs=costs)
    if run.cfg.save_models:
        save_trained(model, mdir / "model", run.tok)  # before its part: a finished method has its model
    return part


def _method_jobs(run: _Scoring, compared: "ComparePlan", out: Path, run_key: dict, preset: str, val) -> dict:
    """The methods' parts (``jobs``) of the plan ``compared`` (its runs at ``preset``, the loaded base model's),
    with what each runs (``configs``: the settings the
    report shows, ``ucfgs``), the methods skipped with their reason (``skipped``, the plan's) and, with
    ``cfg.tune``, each one's tuning (``tuned``)."""
    cfg, progress = run.cfg, compared.progress
    runs = compared.runs[preset]  # one of them: run_compare checked it once the base model was loaded
    # listed in the report with its reason, never run on a stand-in
    plan: dict = {"jobs": [], "configs": {}, "ucfgs": {}, "skipped": dict(compared.skipped), "tuned": {}}
    for name in compared.methods:
        if name in compared.skipped:
            continue
        mdir = out / "methods" / name
        ucfg, used = copy.deepcopy(runs[name].config), copy.deepcopy(runs[name].settings)
        if val is not None and METHODS[name].kind != "edit":
            r = tune(run.base_model, run.tok, val, ucfg, cfg.tuning, out / "tune" / name, progress=progress,
                     eval_kw={"batch_size": cfg.eval_batch_size}, log=lambda line: None)
            ucfg = trial_config(ucfg, r["chosen"])
            s = r["settings"]["unlearn"]
            used = {**used, "lr": s["train"]["lr"], "steps": s["train"]["steps"], "params": s["params"]}
            plan["tuned"][name] = {k: r[k] for k in ("chosen", "feasible", "settings")}
        elif runs[name].tuned is not None:  # where its settings came from, said in results.json
            plan["tuned"][name] = runs[name].tuned
        plan["configs"][name], plan["ucfgs"][name] = used, ucfg
        if cfg.save_models and not (mdir / "model" / "config.json").exists():
            (mdir / "result.json").unlink(missing_ok=True)  # a result whose model is gone is made again
        plan["jobs"].append((name, mdir / "result.json", {"method": used, **run_key},
                             partial(_method_part, run, name, ucfg, mdir)))
    return plan


def _reused(part: dict, was_kept: bool) -> bool:
    """Whether a part was found made (in this ``--out`` or in the cache of the controls), not made here."""
    return was_kept or bool((part.get("shared") or {}).get("reused"))


def _add_costs(cost: CostRecord, here: dict, jobs: list, parts: list, kept: list, built: set) -> None:
    """Every cost stage into ``cost``: those run in this process outside the parts (``here``), then each
    part's; one found made spent nothing here and says what it cost to make; the bases' and the ``built``
    controls' are the controls'."""
    for name, rec in here.items():  # the oracle's evaluation found in the cache spent nothing here
        if rec.get("cached"):
            cost.add(name, None, 0.0, control=True, cached=True,
                     built={k: v for k, v in rec.items() if k != "cached"})
        else:
            cost.add(name, rec, rec["seconds"], control=name == "evaluate:oracle")
    controls = {"oracle", "base", *built}
    for (name, *_), (part, _), was_kept in zip(jobs, parts, kept):
        for stage, rec in (part.get("cost") or {}).items():
            if _reused(part, was_kept):
                cost.add(stage, None, 0.0, control=name in controls, cached=True, built=rec)
            else:
                cost.add(stage, rec, rec["seconds"], control=name in controls)


def _gather(run: _Scoring, jobs: list, parts: list, kept: list, plan: dict, out: Path, bases: dict,
            timings: dict,
            cost: CostRecord, load, run_key: dict) -> tuple[dict, dict]:
    """Each part's metrics, curves and timings into the run's (the controls' build records under their names),
    and on a MUSE task each method's folds; returns ``(curves, model_dirs)``: ``bases`` with the controls' and
    the methods' models."""
    cfg, task, curves, dirs = run.cfg, run.task, {}, dict(bases)
    for (name, *_), (part, _), was_kept in zip(jobs, parts, kept):
        if name in plan["controls"]:  # what was built, with this run's seconds building it, or found made
            stage = (part.get("cost") or {}).get(f"build:{name}")
            timings[name] = part["info"] if "skipped" in part["info"] or stage is None else {
                **part["info"],
                **({"cached": True} if _reused(part, was_kept) else {"seconds": stage["seconds"]})}
            if "metrics" not in part:
                continue
            dirs[name] = str(out / "models" / name)
        elif name in plan["ucfgs"] and cfg.save_models:
            dirs[name] = str(out / "methods" / name / "model")
        run.metrics[name], curves[name] = part["metrics"], part["curves"]
        timings.update(part["timings"])
        if name in plan["ucfgs"] and cfg.muse_folds and task.meta.get("muse"):
            # each fold's copy of the base model is counted
            with cost.stage(f"muse_folds:{name}", run.base_model):
                run.metrics[name].update(muse.method_folds(
                    task, name, plan["ucfgs"][name], run.base_model, run.tok, out,
                    {"method": plan["configs"][name], **run_key}, run.metrics[name],
                    main_model_dir=dirs.get(name),
                    load=load, batch_size=cfg.eval_batch_size, seed=cfg.seed, progress=run.progress))
    return curves, dirs


def _finish(run: _Scoring, out: Path, curves: dict, dirs: dict, plan: dict, timings: dict, cost: CostRecord,
            t0: float, oracle_training: dict | None, model_dir: str | None, base_root: Path | None) -> dict:
    """What the parts make together: each method's outcome, the learning ratios, the verdict, MUSE's headline,
    the trust table and the cost record (each method's share of the oracle's pretraining); the report written.
    Returns :func:`run_compare`'s result."""
    metrics, task, cfg = run.metrics, run.task, run.cfg
    # what each method did, without any attack: the run's outcome line (forgot little: tune)
    for name in plan["ucfgs"]:
        metrics[name]["unlearn_outcome"] = unlearn_outcome(metrics["base"], metrics[name], method=name)
    # each model's relearning cost against the oracle's learning cost, computed once
    add_learning_ratios(metrics)
    robustness = robustness_summary(metrics, items=attack_items(task, cfg.attacks))
    muse.finish(metrics)  # PrivLeak against the oracle, the scal / sust headline
    trust = metric_trust(metrics, robustness["calibration"])
    timings["total_seconds"] = time.time() - t0
    n = n_params(run.base_model)
    pretraining = oracle_training or oracle_pretraining(dirs.get("oracle"), given=model_dir is not None)
    if pretraining is not None:  # its counts, the denominators of every share
        pretraining = {**pretraining, "tokens": pass_tokens(pretraining["passes"]),
                       "flops": pass_flops(pretraining["passes"], n), "n_params": n}
    removal = removal_costs(cost.stages, plan["ucfgs"], dirs, pretraining, n)
    shares, flops = removal_shares(removal, pretraining)  # none: the line says why
    record = cost.as_dict(oracle_pretraining=pretraining, removal=removal, share_of_oracle_pretraining=shares,
                          share_of_oracle_pretraining_flops=flops)
    write_report(out, task, metrics, curves, plan["configs"], timings["total_seconds"], robustness,
                 base_log=None if base_root is None else base_root / "metrics.jsonl", skipped=plan["skipped"],
                 trust=trust, cost=record)
    return {"metrics": metrics, "curves": curves, "configs": plan["configs"], "timings": timings,
            "model_dirs": dirs,
            "robustness": robustness, "skipped": plan["skipped"],
            "attacks_skipped": skipped_attacks(task, cfg.attacks),
            "cost": record, "trust": trust, **({"tuned": plan["tuned"]} if cfg.tune or cfg.tuned else {})}


def compare_settings(seed: int = 0, config_file=None, overrides: list[str] | None = None, *,
                     defaults: dict | None = None, methods: str | Sequence[str] | None = None,
                     on_a_model: bool = False, attacks: str | Sequence[str] | dict | None = None,
                     tune: bool = False, tuned: bool = False,
                     given: dict | None = None) -> CompareConfig:
    """A comparison's settings, the one function ``obliviate compare`` / ``demo`` and ``obliviate.compare``
    build them with, each key once: ``defaults`` (:data:`DEMO` for ``obliviate demo``), ``seed`` at every seed
    of the run, ``tune`` and ``tuned`` (not both), the methods ``methods`` names (:func:`methods_option`;
    ``methods=[...]`` in the config wins), the attacks ``attacks`` names (an unknown one fails in one line; a
    mapping: keys of the attacks' config), ``given`` (the API's keywords, keys of :class:`CompareConfig`), then
    ``config_file`` and the dotted ``overrides``."""
    base = deep_merge(defaults or {}, {"seed": seed, "pretrain": {"seed": seed, "world": {"seed": seed}},
                                       "attacks": {"seed": seed}})
    if tune:
        base["tune"] = True
    if tuned:
        base["tuned"] = True
    names = methods_option(methods if methods is None or isinstance(methods, str) else ",".join(methods),
                           on_a_model=on_a_model)
    # the flag (or, on a user's model, the four baselines); methods=[...] in --config wins
    if names is not None:
        base["methods"] = names
    if isinstance(attacks, dict):
        base = deep_merge(base, {"attacks": attacks})
    elif attacks:  # an unknown name fails here, in one line, before --out
        base = deep_merge(base, {"attacks": {"select": attack_names(attacks)}})
    cfg = build_config(CompareConfig, config_file, overrides, base=deep_merge(base, given or {}))
    if cfg.tune and cfg.tuned:
        raise ConfigError("--tune and --tuned: choose one (--tune tunes each method on this model here; "
                          "--tuned runs each at the settings committed beside it)")
    return cfg


def check_same_vocabulary(tok, oracle_tok, base: str, oracle: str) -> None:
    """A one-line :class:`ModelError` when the oracle's tokenizer is not the base model's: both are scored on
    the same token ids."""
    if oracle_tok is not tok and oracle_tok.get_vocab() != tok.get_vocab():
        raise ModelError(f"the oracle {oracle!r} has another tokenizer than the base model {base!r} "
                         f"({len(oracle_tok)} vs {len(tok)} tokens, or other ids): both are scored on the "
                         "same token ids, so the oracle must share the base model's vocabulary")


@dataclass(frozen=True)
class ComparePlan:
    """What a comparison runs, resolved and checked once (:func:`compare_plan`) from what the user gave (the
    command's flags or the API's keywords, the config file, ``runs.<m>``): every step below reads it and
    checks nothing again."""

    cfg: CompareConfig
    """The settings (:func:`compare_settings`), the seed at every seed of the run."""
    methods: tuple[str, ...]
    """The methods asked for (:func:`compared_methods`), in order."""
    skipped: Mapping[str, str]
    """``{method: why}`` of those that cannot run on the task (:func:`skipped_methods`)."""
    pretraining: Mapping[str, PretrainConfig]
    """The models pretrained on the task's world (:func:`world_pretraining`); empty for a given model or a
    task without a world."""
    runs: Mapping[str, Mapping[str, MethodRun]] = field(default_factory=dict)
    """``{preset: {method: run}}``: each method's run (:func:`method_runs`, the skipped ones left out) at the
    preset of the base model's size (:func:`base_presets`), and at every preset where that size is not known
    before the model is loaded."""
    attacks_key: dict = field(default_factory=dict)
    """The attack settings as the cache of the controls keys them (:func:`~obliviate.runs.cache.settings_key`)."""
    store: ControlCache | None = None
    """The cache of the controls the run uses (:func:`~obliviate.runs.cache.control_cache`, opened once: its
    warning said once); None: none."""
    model: str | None = None
    """The base model (None: the comparison makes its own)."""
    oracle: str | None = None
    """A given oracle."""
    untaught: str | None = None
    """The untaught model the oracle is built from (None: none is built)."""
    control: str | None = None
    """``--control``: the negative control asked for."""
    progress: bool = False


def compare_plan(cfg: CompareConfig, task: Task, model: str | None = None, untaught: str | None = None, *,
                 oracle: str | None = None, control: str | None = None, tokenizers: tuple | None = None,
                 model_size: int | None = None, progress: bool = False) -> ComparePlan:
    """The one checked, frozen plan of a comparison, from ``cfg`` (:func:`compare_settings`) and the task:
    the checks that need no model, in order (the methods' runs, the retain data, the attacks' data, the
    tokenizers, the retain data of the oracle to build from ``untaught``), then the plan said
    (:func:`plan_lines`: what runs, and each method or attack that will not, with its reason). ``untaught``
    (:func:`~obliviate.pipelines.compare.oracle.retain_control_input`) becomes None where the task has no
    retain data to build the oracle from (said in one line; with ``control`` ``retain-finetune`` it fails).
    ``tokenizers``: ``(base tokenizer, oracle tokenizer, base name, oracle name)`` of a given oracle, which
    must share the base model's vocabulary (:func:`check_same_vocabulary`). ``model_size``: ``model``'s
    parameter count read without its weights, which picks the methods' preset (:func:`base_presets`)."""
    methods = compared_methods(cfg)
    check_unused_runs(cfg.runs, methods)
    if cfg.pretrained and (task.pretrain is None or model is not None):
        raise ConfigError("config key 'pretrained': models pretrained beside the base model need a task with a "
                          "world and no --model")
    pretraining = world_pretraining(task, cfg) if task.pretrain is not None and model is None else {}
    presets = base_presets(model, model_size, pretraining, cfg.tiny)
    runs = {p: method_runs(cfg, methods, p) for p in presets}  # each built and checked once, here
    check_retain(task, methods, model)
    check_attackable(task, cfg.attacks)
    # ``(base tokenizer, oracle tokenizer, base name, oracle name)``: read before any model
    if tokenizers is not None:
        check_same_vocabulary(*tokenizers)
    skipped = skipped_methods(cfg, task, methods, runs[presets[0]])
    for line in plan_lines(cfg, task, methods, skipped):  # what will run, what will not and why, before any model
        log.info(line)
    if untaught and not has_retain_data(task, control):  # asked for, it fails in one line
        log.info(f"task {task.name!r} has no retain data to fine-tune the "
                 "model before it was taught the task on: no oracle is built")
        untaught = None
    configs = {**cfg.attacks.configs,
               "relearn": dataclasses.replace(cfg.attacks.configs["relearn"], progress=progress)}
    # the caller's is kept
    cfg = dataclasses.replace(cfg, attacks=dataclasses.replace(cfg.attacks, configs=configs))
    if model and not oracle and not untaught:  # said now, before the run, and again as its last line
        log.info(missing_oracle(model, control))
    runs = {p: MappingProxyType({n: r for n, r in at.items() if n not in skipped}) for p, at in runs.items()}
    return ComparePlan(cfg, tuple(methods), MappingProxyType(skipped), MappingProxyType(pretraining),
                       runs=MappingProxyType(runs), attacks_key=settings_key(cfg.attacks),
                       store=control_cache(cfg.cache), model=model, oracle=oracle,
                       untaught=untaught, control=control, progress=progress)


def run_compare_dir(task: Task, plan: ComparePlan, out, *, load=None, load_control=None) -> dict:
    """The comparison of ``obliviate compare`` and ``obliviate.compare`` (``plan``, :func:`compare_plan`'s) in
    the run directory ``out``: with ``plan.untaught``, first the oracle built from it (``load_control(path)
    -> (model, tokenizer)``, default ``load``), then :func:`run_compare` on ``plan.model`` (a name ``load``
    knows; None: compare builds its own) against the oracle, then ``results.json`` (with ``oracle_build``,
    what built the oracle, and ``cost``, building it included). Returns :func:`run_compare`'s result."""
    cfg, model, oracle, untaught, control = plan.cfg, plan.model, plan.oracle, plan.untaught, plan.control
    out = prepare_out_dir(out)
    cost, built, made = CostRecord(), None, None
    store = plan.store  # the oracle's build and run_compare share it
    # the oracle (negative control) obliviate builds: the untaught model taught the retain data only
    if untaught:
        t = time.time()
        oracle, built = build_oracle(untaught, model, task, out, load_control or load, seed=cfg.seed,
                                     control=control,
                                     progress=plan.progress, cache=store)
        # None: a part kept in this --out by an obliviate before costs were recorded
        made = built.pop("cost", None)
        if built.get("reused"):
            cost.add("build:oracle", None, time.time() - t, control=True, cached=True, built=made,
                     entry=built["cache"])
        else:
            cost.add("build:oracle", made, time.time() - t, control=True)
    training = None if built is None else {
        "passes": {k: made[k] for k in PASS_KEYS} if made else None,
        "what": f"{untaught} fine-tuned on the retain data only: the oracle obliviate built beside a user's "
                "model, whose pretraining obliviate did not run (its fine-tune stands for it)" if made else
        f"unknown: the oracle ({untaught} fine-tuned on the retain data only) kept in {out} was built by an "
        "obliviate that recorded no cost"}
    res = run_compare(task, plan, out, oracle_dir=oracle, load=load if model else None, cost=cost,
                      oracle_training=training, store=store)
    write_results(out, seed=cfg.seed, config=cfg, metrics=res["metrics"], method_settings=res["configs"],
                  timings=res["timings"], task=task, model_dirs=res["model_dirs"],
                  robustness=res["robustness"], skipped=res["skipped"],
                  attacks_skipped=res["attacks_skipped"],
                  trust=res["trust"], cost=res["cost"], **({"oracle_build": built} if built else {}),
                  **({"tuned": res["tuned"]} if "tuned" in res else {}))
    return res
