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
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
from obliviate.evidence.verdict import KNOWN_REMOVED, robustness_summary
from obliviate.methods import METHODS, method_names, preset_name, resolve_method
from obliviate.models.builders import TinyModelConfig, build_tiny_model
from obliviate.models.layers import count_passes
from obliviate.models.load import load_model, load_tokenizer, save_model
from obliviate.pipelines.compare import muse_runs as muse
from obliviate.pipelines.compare.oracle import build_oracle, missing_oracle
from obliviate.pipelines.compare.report import write_report
from obliviate.pipelines.tune.run import TuneConfig, trial_config, tune, validation_split
from obliviate.runs.cache import (ControlCache, control_cache, model_digest, place_model, settings_key,
                                  task_fingerprint, tokenizer_digest)
from obliviate.runs.cost import PASS_KEYS, CostRecord, share_of_pretraining, stage_record
from obliviate.runs.parts import cached_parts, kept_part
from obliviate.runs.results import prepare_out_dir, stored_form, write_results
from obliviate.tasks.base import PreferredAnswers, Task
from obliviate.train.distributed import barrier, is_main_process, save_trained, two_at_a_time
from obliviate.train.finetune import FinetuneConfig, finetune, training_data
from obliviate.train.pretrain import PretrainConfig, cached_pretrain_all, world_for
from obliviate.unlearning.engine import UnlearnConfig, check_method_runs, method_run_config, unlearn
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
    """The attack table's ``default``, ``demo`` and ``compare`` rows: every attack but the optimised suffix and prefix
    (:func:`compare_attacks`; ``--attacks all`` adds them)."""
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    """How the base model and the oracle are pretrained, on a task that has a world (``Task.pretrain``)."""
    parallel: bool = True
    """Two at a time, one torch thread each (a second process): the base model's and the oracle's pretraining, then
    the attacks on the oracle and the base model, and the controls and methods (built, evaluated and attacked;
    :func:`obliviate.runs.parts.cached_parts`). Only on
    the CPU, in one process, for models of at most :data:`PARALLEL_MAX_PARAMS` parameters; on 2 cores it nearly
    halves the wall time of tiny models, whose small matrix products do not use a second thread."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """The tiny model trained from scratch when no ``--model`` is given (tasks without a world)."""
    oracle: bool = True
    """Build (no ``--model``) an oracle that never saw the forget data: the negative control."""
    known_removed: bool = True
    """On a task pretrained on its world, with ``oracle``: also pretrain the models known to have removed, judged as
    methods (:data:`obliviate.evidence.verdict.KNOWN_REMOVED`): the second oracle and the filtered model."""
    positive_control: bool = True
    """Build and attack a model known to only suppress (:func:`obliviate.evidence.controls.suppression_control`)."""
    positive_control_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.evidence.controls.suppression_control` (``max_steps``, ``lr``)."""
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
    """Run each method at settings chosen for this base model (``compare --tune``, :mod:`obliviate.pipelines.tune`):
    on a validation split of the forget and retain pairs; every model is then scored on the other items only."""
    tuning: TuneConfig = field(default_factory=TuneConfig)
    """The grid, budget, constraint and split of ``tune`` (``tuning.budget=6``)."""
    muse_folds: bool = True
    """On a MUSE task, also run each method over MUSE's scalability folds and sustainability requests (``scal/``,
    ``sust/``; :mod:`obliviate.pipelines.compare.muse_runs`)."""
    cache: bool = True
    """Keep the oracle built beside a user's model, the attacks on the oracle and the base model, and the positive
    controls (made and attacked) in the cache shared by every run directory (:mod:`obliviate.runs.cache`), and reuse
    them: a second comparison on the same base model runs only its methods. ``--no-cache`` (``cache=false``) makes
    them in this run."""


PARALLEL_MAX_PARAMS = 100_000_000
"""The largest model ``compare`` works on two at a time (each process holds its own copy of a model being unlearned)."""


def compare_attacks() -> TaskAttackConfig:
    """The attacks ``compare`` runs unless told: the attack table's rows that run in ``compare``
    (:func:`~obliviate.evidence.attack_table.enabled_in`), every attack but GCG's suffix and prefix."""
    return TaskAttackConfig(enabled=dict.fromkeys(enabled_in("compare"), True))


DEMO = {"methods": ["graddiff", "npo", "simnpo", "rmu"],
        "attacks": {"lr_grid": [3e-4], "relearn": {"lr_grid": [1e-3]}, "lora": False,
                    **{n: False for n in enabled_in("compare") if n not in enabled_in("demo")}}}
"""What ``obliviate demo`` changes in :class:`CompareConfig`: the four baselines, one attacker setting per
relearning attack (no LoRA), and of the attacks only those of the attack table's ``default`` and ``demo`` rows (the
cheap newer ones: quantization, direction ablation, logit lens, in-context), which keeps the demo within minutes;
``compare`` tries the whole grid and every attack but GCG's suffix and prefix (docs/evaluation.md, "More attacks",
gives each one's cost)."""


BASELINES = DEMO["methods"]
"""``compare``'s methods on a user's model (``--model``, and the API) unless told otherwise: the four baselines, as the
demo runs them (every method, ``--methods all``, took 643 s on a 3-layer toy model: days on a 7B)."""


def methods_option(text: str | None, *, on_a_model: bool) -> list[str] | None:
    """The methods ``compare --methods a,b`` names (any case: :func:`~obliviate.methods.resolve_method`; ``all``:
    every registered method); without the flag, :data:`BASELINES` on a user's model, else None (the config decides,
    every method by default)."""
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


def plan_lines(cfg: "CompareConfig", task: Task) -> list[str]:
    """The lines a comparison starts with, before any model: how many methods and attacks it will run, then one line
    for each method or attack asked for that will not run, with its reason (:func:`skipped_methods`,
    :func:`~obliviate.evidence.harness.skipped_attacks`)."""
    methods, skipped = compared_methods(cfg), skipped_methods(cfg, task)
    running = [m for m in methods if m not in skipped]
    attacks = list(enabled_attacks(task, cfg.attacks))  # in the order they run
    not_attacked = skipped_attacks(task, cfg.attacks)
    asked = (f" of {len(methods)} asked for" if skipped else "")
    line = (f"compare: {_count(len(running), 'method')}{asked} ({', '.join(running) or 'none'}) and "
            f"{_count(len(attacks), 'attack')} ({', '.join(attacks) or 'none'}) on {task.name}")
    return [line, *(not_run_line("method", n, why) for n, why in skipped.items()),
            *(not_run_line("attack", n, why) for n, why in not_attacked.items())]


def skipped_methods(cfg: "CompareConfig", task: Task) -> dict[str, str]:
    """``{name: why}`` of the compared methods that cannot run on ``task`` as configured (:func:`skip_reason`), known
    from the inputs before any model (a method's own params are read at the tiny preset, as
    :func:`~obliviate.unlearning.engine.check_method_runs` reads them)."""
    out = {}
    for name in compared_methods(cfg):
        why = skip_reason(task, name, method_run_config(name, cfg.runs.get(name), "tiny", cfg.seed)[0].params)
        if why is not None:
            out[name] = why
    return out


def compared_methods(cfg: "CompareConfig") -> list[str]:
    """The methods a comparison considers: ``cfg.methods``, else every registered method (those that cannot run on
    the task are listed as skipped, with their reason: :func:`skip_reason`)."""
    return list(cfg.methods) if cfg.methods is not None else method_names()


def skip_reason(task: Task, name: str, params: dict | None = None) -> str | None:
    """Why method ``name`` (its ``params``) cannot run as it should on ``task`` (None: it can): an IdK method needs
    forget QA pairs, DPO preference data, a method with :attr:`~obliviate.unlearning.contract.Method.compare_needs`
    those config keys set. A comparison lists such a method as skipped with this line rather than run it on a
    stand-in."""
    cls = METHODS[name]
    if getattr(cls, "needs_idk", False) and task.forget.docs:
        return (f"needs forget QA pairs (it pairs each forget question with a preferred answer); the forget data holds "
                f"{len(task.forget.docs)} documents")
    if cls.needs_preference_data and not isinstance(task.idk, PreferredAnswers):
        return ("needs preference data (a chosen answer for each forget QA pair: a forget file with `chosen` and "
                "`rejected` fields); the task has none")
    unset = [k for k in cls.compare_needs if not (params or {}).get(k)]
    if unset:
        what = ", ".join(f"`runs.{name}.params.{k}` ({cls.compare_needs[k]})" for k in unset)
        return f"needs {what}; without them it would fit on a stand-in (its first training batch)"
    return None


def check_retain(task: Task, methods: list[str], model_dir: str | None) -> None:
    """A one-line :class:`DataError` when ``task`` has no retain data but the comparison needs it (any method's retain
    term; the tiny base model's training without ``model_dir``), naming every file the task found missing."""
    if not task.retain and (methods or model_dir is None):
        missing = "".join(f"; {x}" for x in task.meta.get("missing") or [])
        raise DataError(f"task {task.name!r} has no retain data, which every method's retain term (and the tiny base "
                        f"model's training) needs{missing}")


def edit_note(summary: dict) -> dict:
    """What an edit method's run says it did, for the report (``n_edited``: EMBER's edited token rows), its scalar
    entries only."""
    info = summary.get("edit") or {}
    return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool)) and k != "method"}


def method_config(cfg: CompareConfig, name: str, preset: str) -> tuple[UnlearnConfig, dict]:
    """Method ``name``'s run: its ``preset``, then ``cfg.runs[name]``."""
    return method_run_config(name, cfg.runs.get(name), preset, cfg.seed)


def data_fingerprint(task: Task) -> str:
    """A hash of the task's forget and retain data and of its evaluation items (a file edited in place changes it)."""
    h = hashlib.sha256()
    for part in (task.forget.qa, task.forget.docs, task.retain.qa, task.retain.docs, task.relearn or []):
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
    for es in task.evals:
        h.update(json.dumps([es.name, es.role, es.kind, [dict(x) if isinstance(x, dict) else x.to_dict()
                                                         for x in es.items]], sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def task_texts(task: Task) -> list[str]:
    """Every text of a task, for training a tokenizer that covers it."""
    texts = [f"{task.prompt.prompt(q)}{task.prompt.answer(a)}" for d in (task.forget, task.retain) for q, a in d.qa]
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
"""The second oracle's pretraining seed is the oracle's plus this (the same world, another initialisation and data
order)."""


def pretrained_bases(task: Task, cfg: CompareConfig, out: Path, progress: bool) -> tuple[dict[str, str], Path]:
    """The base model and (``cfg.oracle``) the oracle pretrained on the task's world, without its forget split
    for the oracle, and (``cfg.known_removed``) the second oracle (another pretraining seed) and the filtered model
    (the whole corpus, the forget split's tokens loss-masked: ``PretrainConfig.mask_splits``); cached across runs
    and copied into ``out/models``, two at a time. Returns the directories and the base model's cache entry (its
    training log)."""
    pcfg = dataclasses.replace(cfg.pretrain, world=task.pretrain)
    world_for(pcfg).save(out / "world")
    cfgs = {"base": pcfg}
    if cfg.oracle:
        cfgs["oracle"] = copy.deepcopy(pcfg)
        cfgs["oracle"].exclude_splits = sorted(set(pcfg.exclude_splits) | {"forget"})
        if cfg.known_removed:
            cfgs["second_oracle"] = dataclasses.replace(copy.deepcopy(cfgs["oracle"]),
                                                        seed=pcfg.seed + SECOND_ORACLE_SEED)
            cfgs["filtered"] = copy.deepcopy(pcfg)
            cfgs["filtered"].mask_splits = sorted(set(pcfg.mask_splits) | {"forget"})
    roots = dict(zip(cfgs, cached_pretrain_all(list(cfgs.values()), progress, parallel=cfg.parallel)))
    dirs = {}
    for name, root in roots.items():
        _copy_model(root / "model", out / "models" / name)
        if is_main_process() and (root / "pretrain.json").exists():  # its pretraining cost (a known model's cost)
            shutil.copyfile(root / "pretrain.json", out / "models" / name / "pretrain.json")
        dirs[name] = str(out / "models" / name)
    return dirs, roots["base"]


def note_data_change(out: Path, data: str) -> bool:
    """Say in one line (stderr) when ``out`` holds finished parts made from other data than the task's now (an edited
    forget or retain file of the same size, rerun into the same ``--out``): they are not reused, and the run starts
    afresh. Returns whether it said so."""
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
        source = {"model": name, "tiny": to_dict(cfg.tiny), "finetune": to_dict(cfg.finetune), "seed": cfg.seed,
                  "task": task.summary(), "data": data_fingerprint(task)}
        if _made_by(run_write_path(d), source):
            continue
        seed_everything(cfg.seed)
        model, tok = build_tiny_model(task_texts(task) if tok is None else tok, cfg.tiny, seed=cfg.seed)
        data = training_data(task, "both" if name == "base" else "retain")
        with count_passes(model) as passes:  # its pretraining, from scratch (a resumed run: since its checkpoint)
            model, _ = finetune(model, tok, data, cfg.finetune, out / "train" / name, prompt=task.prompt,
                                preset="tiny", progress=progress, resume=True)
        save_model(model, d)
        tok.save_pretrained(str(d))
        (d / "pretrain.json").write_text(json.dumps({"passes": dict(passes)}, indent=2))
        (d / "DONE").write_text(json.dumps(source, sort_keys=True))
    return {k: str(v) for k, v in dirs.items()}


def oracle_pretraining(oracle_dir: str | None, *, given: bool) -> dict | None:
    """What training the oracle cost, where it is known: the ``pretrain.json`` beside its model (the world's
    pretraining, or the tiny oracle trained from scratch on the task's retain data); ``given``: a user's model,
    whose oracle (``--oracle DIR``) obliviate did not train. None without an oracle or a record of it."""
    if not oracle_dir:
        return None
    path = Path(oracle_dir) / "pretrain.json"
    try:
        passes = json.loads(path.read_text()).get("passes")
    except (OSError, ValueError, AttributeError):
        passes = None
    if not passes:
        return {"passes": None, "what": "unknown: the oracle was given (--oracle) and records no pretrain.json"
                if given else "unknown: the oracle records no pretrain.json"}
    return {"passes": passes, "what": "the oracle's pretraining (pretrain.json beside it)"}


def run_compare(task: Task, cfg: CompareConfig, out: Path, *, model_dir: str | None = None,
                oracle_dir: str | None = None, load=None, progress: bool = True, cost: CostRecord | None = None,
                oracle_training: dict | None = None, store: ControlCache | None = ...) -> dict:
    """Every method of ``cfg`` on ``task``, beside the base model and the controls; the report in ``out``.

    The base model is ``model_dir``; without one it is pretrained on the task's world (``task.pretrain``) or,
    for other tasks, a tiny model fine-tuned on the task, with an oracle built the same way without the forget
    data (``oracle_dir`` names one beside ``model_dir``). Every model is evaluated
    (:func:`~obliviate.eval.suite.evaluate_task`) and attacked (:func:`~obliviate.evidence.harness.run_task_attacks`)
    once. Each finished method is kept in ``out/methods/<name>/`` (``result.json`` and its model), each control in
    ``out/controls/`` and the attacks on the oracle and the base model in ``out/attacks/``, so an interrupted
    comparison resumes. ``load(path) -> (model, tokenizer)`` loads a model directory (the command
    passes its device and dtype). Returns ``metrics``, ``curves``, ``configs``, ``timings``, ``model_dirs``,
    ``robustness``, ``trust`` (:func:`~obliviate.evidence.trust.metric_trust`: which numbers separate the models
    with the knowledge from those without, and stay put under quantization) and ``cost``
    (:class:`~obliviate.runs.cost.CostRecord`'s, into ``cost`` when given, with the oracle's pretraining,
    ``oracle_training`` where the caller built the oracle, and each method's share of it).

    With ``cfg.cache`` the attacks on the oracle and the base model and the positive controls (made and attacked)
    are parts of the cache of the controls shared by every run directory (:mod:`obliviate.runs.cache`), by the
    weights of the base model and the oracle, the task and the settings: ``store``, the run's one
    (:func:`~obliviate.runs.cache.control_cache`, made once per run; None: none), made here when not given.
    """
    methods = compared_methods(cfg)
    check_method_runs(cfg.runs, methods)  # unknown names, bad or unused overrides fail before any training
    check_attackable(task, cfg.attacks)  # before any model is built
    check_retain(task, methods, model_dir)
    load = load or (lambda p: (load_model(p), load_tokenizer(p)))
    t0 = time.time()
    cost = cost if cost is not None else CostRecord()
    base_root = None
    if model_dir is not None:
        dirs = {"base": model_dir, **({"oracle": oracle_dir} if oracle_dir else {})}
    elif task.pretrain is not None:
        dirs, base_root = pretrained_bases(task, cfg, out, progress)
    else:
        dirs = tiny_bases(task, cfg, out, progress)
    base_model, tok = load(dirs["base"])
    bases_seconds = time.time() - t0  # pretraining or fine-tuning the base and the oracle (0 when cached or given)
    cost.add("bases", None, bases_seconds)  # their passes: each one's pretrain.json (the oracle's below)
    preset = preset_name(base_model)
    parallel = (cfg.parallel and two_at_a_time() and all(p.device.type == "cpu" for p in base_model.parameters())
                and sum(p.numel() for p in base_model.parameters()) <= PARALLEL_MAX_PARAMS)
    run_key = {"seed": cfg.seed, "base": dirs["base"], "oracle": dirs.get("oracle"), "task": task.summary(),
               "data": data_fingerprint(task), "attacks": to_dict(cfg.attacks), "eval_batch_size": cfg.eval_batch_size,
               "tune": cfg.tune}  # what a finished method's part must share with this run to be reused
    note_data_change(out, run_key["data"])
    val = None
    if cfg.tune:  # choose on the validation items, score every model on the others (the training data is whole)
        val, task = validation_split(task, cfg.tuning.val_fraction, cfg.tuning.split_seed)
    store = control_cache(cfg.cache) if store is ... else store
    shared_key = None if store is None else {  # what every shared part reads beside its own model (run_key's paths
        # are not: the same base model read from another place makes the same parts)
        "task": task_fingerprint(task), "attacks": settings_key(cfg.attacks), "seed": cfg.seed,
        "eval_batch_size": cfg.eval_batch_size, "tokenizer": tokenizer_digest(tok), "base": model_digest(base_model)}
    tuned: dict = {}
    metrics: dict = {}
    curves: dict = {}
    timings: dict = {"bases_seconds": bases_seconds}
    shown = {"progress": progress}  # the second process of a parallel run turns its bars off (quiet, below)
    base_cache: dict = {}  # the base model's scores, computed once for every model attacked in this process

    # Each part below is a function of the models and settings alone: it returns what it made (metrics, curves,
    # timings) and writes nothing else, so it runs alike in this process or in the child of a parallel run
    # (runs.parts.cached_parts); the loop after them gathers the parts' results.
    def evaluate(name: str, model, costs: dict) -> tuple[dict, dict]:
        """(metrics, timings) of ``model``, scored against the base model's metrics (but the base model's own); its
        cost stage goes to ``costs``."""
        t = time.time()
        with count_passes(model) as passes:
            m = evaluate_task(model, tok, task, batch_size=cfg.eval_batch_size, progress=shown["progress"])
            m.update(muse.model_metrics(task, model, tok, cfg.eval_batch_size))  # MUSE's six-way, on a MUSE task
        if name != "base":
            m.update(score_against(metrics["base"], m))
        costs[f"evaluate:{name}"] = stage_record(passes, time.time() - t)
        return m, {f"{name}_eval_seconds": time.time() - t}

    def attack(name: str, model, m: dict, costs: dict) -> tuple[dict, dict, dict]:
        """(metrics ``m`` with every attack's, the relearning curves, timings) of ``model``; each attack's cost stage
        goes to ``costs``."""
        t = time.time()
        per: dict = {}
        spent: dict = {}
        att = run_task_attacks(model, tok, task, cfg.attacks, base_model=base_model, metrics=m, base_cache=base_cache,
                               timings=per, costs=spent)
        costs.update({f"attack:{name}:{k}": rec for k, rec in spent.items()})
        curve = {k: att[f"{k}_curve"] for k in ("relearn", "relearn_disjoint") if f"{k}_curve" in att}
        return {**m, **att}, curve, {f"{name}_attack_seconds": time.time() - t, f"{name}_seconds_by_attack": per}

    def scored(name: str, model, m: dict | None = None, before: dict | None = None, costs: dict | None = None) -> dict:
        """The part of a model: evaluated (unless ``m`` is given), then attacked; ``before``: timings of its making,
        ``costs``: the cost stages of its making (the part returns them with its own under ``cost``)."""
        t: dict = dict(before or {})
        costs = {} if costs is None else costs
        if m is None:
            m, te = evaluate(name, model, costs)
            t.update(te)
        m, curve, ta = attack(name, model, m, costs)
        return {"metrics": m, "curves": curve, "timings": {**t, **ta}, "cost": costs}

    def shared(what: str, ident: dict, fn, place: Path | None = None):
        """The part ``fn`` (``fn(folder)``: ``folder`` receives the files it keeps, its ``model/``) through the cache
        of the controls (:mod:`obliviate.runs.cache`), where the run uses it: made once for every comparison on the
        same base model, task and settings, whatever its ``--out``; the model of a control kept there is linked at
        ``place``."""
        if store is None:
            return lambda: fn(None)

        def part() -> dict:
            hit = store.get("compare-part", {**shared_key, **ident}, fn, what=what)
            if place is not None and "metrics" in hit:
                place_model(hit.path / "model", place)
            return {**hit, "shared": {"entry": str(hit.path), "reused": hit.reused}}

        return part

    here: dict = {}  # the cost stages run in this process outside the parts
    metrics["base"], te = evaluate("base", base_model, here)
    timings.update(te)
    oracle_ref = None
    held: dict = {}
    jobs: list = []  # (name, path, key, fn): the attacks on the oracle and the base model, the controls, then the
    # methods, each a part made once (two at a time with `parallel`)
    if "oracle" in dirs:
        oracle, oracle_tok = load(dirs["oracle"])
        check_same_vocabulary(tok, oracle_tok, dirs["base"], dirs["oracle"])
        oracle_id = {"part": "oracle", "oracle": None if store is None else model_digest(oracle)}

        def oracle_scores(_folder=None) -> dict:
            """The oracle's evaluation and what oracle_distance compares each model with (a part of the cache)."""
            costs: dict = {}
            m, te = evaluate("oracle", oracle, costs)
            ref = None if m.get("forget_score") is None else oracle_reference(oracle, tok, task, m["forget_score"])
            if ref is not None and ref["truth_ratios"] is not None:
                ref["truth_ratios"] = [float(x) for x in ref["truth_ratios"]]  # as stored, with the cache or not
            return {"metrics": m, "timings": te, "ref": ref, "cost": costs}

        got = stored_form(shared("the oracle's evaluation", {**oracle_id, "part": "oracle-scores"}, oracle_scores)())
        metrics["oracle"], oracle_ref = got["metrics"], got["ref"]
        timings.update(got["timings"])
        for stage, rec in got["cost"].items():
            here[stage] = {**rec, "cached": True} if (got.get("shared") or {}).get("reused") else rec
        held["oracle"] = oracle  # its part takes it, so that it is freed once attacked
        del oracle
        jobs.append(("oracle", out / "attacks" / "oracle.json", {"attacked": "oracle", **run_key},
                     shared("the attacks on the oracle", oracle_id,
                            lambda _folder: scored("oracle", held.pop("oracle"), metrics["oracle"]))))
    jobs.append(("base", out / "attacks" / "base.json", {"attacked": "base", **run_key},
                 shared("the attacks on the base model", {"part": "base"},
                        lambda _folder: scored("base", base_model, metrics["base"]))))
    builders = positive_controls(cfg)
    for cname, (build, kwargs) in builders.items():
        cdir = out / "models" / cname

        def control_part(folder, cname=cname, build=build, kwargs=kwargs, cdir=cdir) -> dict:
            t = time.time()
            with count_passes(base_model) as passes:  # the builder's copy of the base model is counted with it
                control, info = build_positive_control(build, base_model, tok, task, seed=cfg.seed, kwargs=kwargs,
                                                       progress=shown["progress"])
            made = {f"build:{cname}": stage_record(passes, time.time() - t)}  # its seconds: here, not in info
            if control is None:  # e.g. a task with MCQs only: nothing to refuse
                return {"info": info, "cost": made}
            part = scored(cname, control, costs=made)
            save_trained(control, cdir if folder is None else folder / "model", tok)  # a finished control has its model
            return {**part, "info": info}

        if not (cdir / "config.json").exists():
            (out / "controls" / f"{cname}.json").unlink(missing_ok=True)  # a control whose model is gone
        jobs.append((cname, out / "controls" / f"{cname}.json", {"control": cname, "args": kwargs, **run_key},
                     shared(f"the {cname} built from the base model", {"part": cname, "args": kwargs}, control_part,
                            place=cdir)))
    for kname in [n for n in KNOWN_REMOVED if n in dirs]:  # judged as methods, built with the bases

        def known_part(kname=kname) -> dict:
            model, ktok = load(dirs[kname])
            if ktok.get_vocab() != tok.get_vocab():
                raise ModelError(f"{dirs[kname]!r} has another tokenizer than the base model")
            costs: dict = {}
            m, te = evaluate(kname, model, costs)
            if oracle_ref is not None:
                m.update(oracle_distance(model, tok, task, oracle_ref, m["forget_score"]))
            part = scored(kname, model, m, before=te, costs=costs)
            info = Path(dirs[kname]) / "pretrain.json"  # its cost: a whole pretraining run
            passes = json.loads(info.read_text()).get("passes") if info.exists() else None
            return {**part, "timings": {**part["timings"], f"{kname}_pretrain_passes": passes}}

        jobs.append((kname, out / "known" / f"{kname}.json", {"known": kname, **run_key}, known_part))
    configs, ucfgs, skipped = {}, {}, {}
    for name in methods:
        mdir = out / "methods" / name
        ucfg, used = method_config(cfg, name, preset)
        why = skip_reason(task, name, ucfg.params)
        if why is not None:  # listed in the report with its reason, never run on a stand-in
            skipped[name] = why
            continue
        if val is not None and METHODS[name].kind != "edit":
            r = tune(base_model, tok, val, ucfg, cfg.tuning, out / "tune" / name, progress=progress,
                     eval_kw={"batch_size": cfg.eval_batch_size}, log=lambda line: None)
            ucfg = trial_config(ucfg, r["chosen"])
            s = r["settings"]["unlearn"]
            used = {**used, "lr": s["train"]["lr"], "steps": s["train"]["steps"], "params": s["params"]}
            tuned[name] = {k: r[k] for k in ("chosen", "feasible", "settings")}
        configs[name], ucfgs[name] = used, ucfg

        def method_part(name=name, ucfg=ucfg, mdir=mdir) -> dict:
            seed_everything(cfg.seed)
            model = copy.deepcopy(base_model)
            t = time.time()
            model, summary = unlearn(model, tok, task.forget, task.retain, ucfg, mdir / "train", prompt=task.prompt,
                                     idk=task.idk, progress=shown["progress"], resume=False)
            made = {f"{name}_unlearn_seconds": time.time() - t,
                    f"{name}_unlearn_passes": summary.get("passes")}  # forwards and backwards (none for an edit)
            costs = {f"unlearn:{name}": stage_record(summary.get("passes"), time.time() - t)}
            m, te = evaluate(name, model, costs)
            if edit_note(summary):
                m["edit"] = edit_note(summary)
            if oracle_ref is not None:
                m.update(oracle_distance(model, tok, task, oracle_ref, m["forget_score"]))
            part = scored(name, model, m, before={**made, **te}, costs=costs)
            if cfg.save_models:
                save_trained(model, mdir / "model", tok)  # before its part: a finished method has its model
            return part

        if cfg.save_models and not (mdir / "model" / "config.json").exists():
            (mdir / "result.json").unlink(missing_ok=True)  # a result whose model is gone is made again
        jobs.append((name, mdir / "result.json", {"method": used, **run_key}, method_part))

    def quiet() -> None:  # the second process draws no progress bars
        shown["progress"] = False

    kept = [kept_part(path, key) is not None for _, path, key, _ in jobs]  # made by an earlier run into this --out
    parts = cached_parts([job[1:] for job in jobs], parallel=parallel, in_child=quiet)
    held.clear()  # the oracle, when its attacks were kept from an earlier run
    for name, rec in here.items():  # the oracle's evaluation found in the cache spent nothing here
        if rec.get("cached"):
            cost.add(name, None, 0.0, control=True, cached=True, built={k: v for k, v in rec.items() if k != "cached"})
        else:
            cost.add(name, rec, rec["seconds"], control=name == "evaluate:oracle")
    for (name, *_), (part, _), was_kept in zip(jobs, parts, kept):
        reused = was_kept or bool((part.get("shared") or {}).get("reused"))
        for stage, rec in (part.get("cost") or {}).items():  # found made: nothing spent here, it cost this to make
            control = name in ("oracle", "base") or name in builders
            if reused:
                cost.add(stage, None, 0.0, control=control, cached=True, built=rec)
            else:
                cost.add(stage, rec, rec["seconds"], control=control)
    for (name, *_), (part, _), was_kept in zip(jobs, parts, kept):  # the oracle's and the base model's attacks,
        # the controls, the methods
        if name in builders:  # what was built, with this run's seconds building it, or found made
            stage = (part.get("cost") or {}).get(f"build:{name}")
            timings[name] = part["info"] if "skipped" in part["info"] or stage is None else {
                **part["info"], **({"cached": True} if was_kept or (part.get("shared") or {}).get("reused")
                                   else {"seconds": stage["seconds"]})}
            if "metrics" not in part:
                continue
            dirs[name] = str(out / "models" / name)
        elif name in ucfgs and cfg.save_models:
            dirs[name] = str(out / "methods" / name / "model")
        metrics[name], curves[name] = part["metrics"], part["curves"]
        timings.update(part["timings"])
        if name in ucfgs and cfg.muse_folds and task.meta.get("muse"):
            with cost.stage(f"muse_folds:{name}", base_model):  # each fold's copy of the base model is counted
                metrics[name].update(muse.method_folds(
                    task, name, ucfgs[name], base_model, tok, out, {"method": configs[name], **run_key},
                    metrics[name], main_model_dir=dirs.get(name), load=load, batch_size=cfg.eval_batch_size,
                    seed=cfg.seed, progress=progress))
    for name in ucfgs:  # what each method did, without any attack: the run's outcome line (forgot little: try tune)
        metrics[name]["unlearn_outcome"] = unlearn_outcome(metrics["base"], metrics[name], method=name)
    add_learning_ratios(metrics)  # each model's relearning cost against the oracle's learning cost, computed once
    robustness = robustness_summary(metrics, items=attack_items(task, cfg.attacks))
    muse.finish(metrics)  # PrivLeak against the oracle, the scal / sust headline
    trust = metric_trust(metrics, robustness["calibration"])
    timings["total_seconds"] = time.time() - t0
    pretraining = oracle_training or oracle_pretraining(dirs.get("oracle"), given=model_dir is not None)
    shares = {name: share_of_pretraining((cost.stages.get(f"unlearn:{name}") or {}).get("built")
                                         or cost.stages.get(f"unlearn:{name}"), pretraining["passes"])
              for name in ucfgs} if pretraining and pretraining.get("passes") else {}  # else the line says why
    record = cost.as_dict(oracle_pretraining=pretraining, share_of_oracle_pretraining=shares)
    write_report(out, task, metrics, curves, configs, timings["total_seconds"], robustness,
                 base_log=None if base_root is None else base_root / "metrics.jsonl", skipped=skipped, trust=trust)
    return {"metrics": metrics, "curves": curves, "configs": configs, "timings": timings, "model_dirs": dirs,
            "robustness": robustness, "skipped": skipped, "attacks_skipped": skipped_attacks(task, cfg.attacks),
            "cost": record,
            "trust": trust, **({"tuned": tuned} if cfg.tune else {})}


def compare_settings(seed: int = 0, config_file=None, overrides: list[str] | None = None, *,
                     defaults: dict | None = None, methods: str | Sequence[str] | None = None,
                     on_a_model: bool = False, attacks: str | Sequence[str] | dict | None = None, tune: bool = False,
                     given: dict | None = None) -> CompareConfig:
    """A comparison's settings, the one function ``obliviate compare`` / ``demo`` and ``obliviate.compare`` build them
    with, each key once: ``defaults`` (:data:`DEMO` for ``obliviate demo``), ``seed`` at every seed of the run,
    ``tune``, the methods ``methods`` names (:func:`methods_option`; ``methods=[...]`` in the config wins), the attacks
    ``attacks`` names (an unknown one fails in one line; a mapping: keys of the attacks' config), ``given`` (the API's
    keywords, keys of :class:`CompareConfig`), then ``config_file`` and the dotted ``overrides``."""
    base = deep_merge(defaults or {}, {"seed": seed, "pretrain": {"seed": seed, "world": {"seed": seed}},
                                       "attacks": {"seed": seed}})
    if tune:
        base["tune"] = True
    names = methods_option(methods if methods is None or isinstance(methods, str) else ",".join(methods),
                           on_a_model=on_a_model)
    if names is not None:  # the flag (or, on a user's model, the four baselines); methods=[...] in --config wins
        base["methods"] = names
    if isinstance(attacks, dict):
        base = deep_merge(base, {"attacks": attacks})
    elif attacks:  # an unknown name fails here, in one line, before --out
        base = deep_merge(base, {"attacks": {"select": attack_names(attacks)}})
    return build_config(CompareConfig, config_file, overrides, base=deep_merge(base, given or {}))


def check_same_vocabulary(tok, oracle_tok, base: str, oracle: str) -> None:
    """A one-line :class:`ModelError` when the oracle's tokenizer is not the base model's: both are scored on the same
    token ids."""
    if oracle_tok is not tok and oracle_tok.get_vocab() != tok.get_vocab():
        raise ModelError(f"the oracle {oracle!r} has another tokenizer than the base model {base!r} "
                         f"({len(oracle_tok)} vs {len(tok)} tokens, or other ids): both are scored on the same token "
                         "ids, so the oracle must share the base model's vocabulary")


def check_compare_inputs(cfg: CompareConfig, task: Task, model: str | None = None, untaught: str | None = None, *,
                 control: str | None = None, tokenizers: tuple | None = None) -> str | None:
    """The checks of a comparison that need no model, in order (the methods' runs, the retain data, the attacks' data,
    the tokenizers, the retain data of the oracle to build from ``untaught``), then the plan said (:func:`plan_lines`:
    what runs, and each method or attack that will not, with its reason); returns ``untaught``, None where the task
    has no retain data to build the oracle from (said in one line; with ``control`` ``retain-finetune`` it fails).
    ``tokenizers``: ``(base tokenizer, oracle tokenizer, base name, oracle name)`` of a given oracle, which must share
    the base model's vocabulary (:func:`check_same_vocabulary`)."""
    check_method_runs(cfg.runs, compared_methods(cfg))
    check_retain(task, compared_methods(cfg), model)
    check_attackable(task, cfg.attacks)
    if tokenizers is not None:  # ``(base tokenizer, oracle tokenizer, base name, oracle name)``: read before any model
        check_same_vocabulary(*tokenizers)
    for line in plan_lines(cfg, task):  # what will run, and what will not and why, before any model
        log.info(line)
    if untaught and not has_retain_data(task, control):  # asked for, it fails in one line
        log.info(f"task {task.name!r} has no retain data to fine-tune the model before it was taught the task on: "
                 "no oracle is built")
        return None
    return untaught


def run_compare_dir(task: Task, cfg: CompareConfig, out, *, model: str | None = None, oracle: str | None = None,
                    untaught: str | None = None, load=None, load_control=None, control: str | None = None,
                    progress: bool = False) -> dict:
    """The comparison of ``obliviate compare`` and ``obliviate.compare`` in the run directory ``out``: with
    ``untaught`` (:func:`~obliviate.pipelines.compare.oracle.retain_control_input`, checked by
    :func:`check_compare_inputs`), first the oracle built from it (``load_control(path) -> (model, tokenizer)``,
    default ``load``), then :func:`run_compare` on ``model`` (a name ``load`` knows; None: compare builds its own)
    against ``oracle``, then ``results.json`` (with ``oracle_build``, what built the oracle, and ``cost``, building it
    included). Returns :func:`run_compare`'s result."""
    cfg.attacks.relearn.progress = progress
    out = prepare_out_dir(out)
    cost, built, made = CostRecord(), None, None
    store = control_cache(cfg.cache)  # once per run: the oracle's build and run_compare share it (and its warning)
    if untaught:  # the oracle (negative control) obliviate builds: the untaught model taught the retain data only
        t = time.time()
        oracle, built = build_oracle(untaught, model, task, out, load_control or load, seed=cfg.seed, control=control,
                                     progress=progress, cache=store)
        made = built.pop("cost", None)  # None: a part kept in this --out by an obliviate before costs were recorded
        if built.get("reused"):
            cost.add("build:oracle", None, time.time() - t, control=True, cached=True, built=made, entry=built["cache"])
        else:
            cost.add("build:oracle", made, time.time() - t, control=True)
    elif model and not oracle:  # said now, before the run, and again as its last line
        log.info(missing_oracle(model, control))
    training = None if built is None else {
        "passes": {k: made[k] for k in PASS_KEYS} if made else None,
        "what": f"{untaught} fine-tuned on the retain data only: the oracle obliviate built beside a user's model, "
        "whose pretraining obliviate did not run (its fine-tune stands for it)" if made else
        f"unknown: the oracle ({untaught} fine-tuned on the retain data only) kept in {out} was built by an "
        "obliviate that recorded no cost"}
    res = run_compare(task, cfg, out, model_dir=model, oracle_dir=oracle, load=load if model else None,
                      progress=progress, cost=cost, oracle_training=training, store=store)
    write_results(out, seed=cfg.seed, config=cfg, metrics=res["metrics"], method_settings=res["configs"],
                  timings=res["timings"], task=task, model_dirs=res["model_dirs"],
                  robustness=res["robustness"], skipped=res["skipped"], attacks_skipped=res["attacks_skipped"],
                  trust=res["trust"], cost=res["cost"], **({"oracle_build": built} if built else {}),
                  **({"tuned": res["tuned"]} if "tuned" in res else {}))
    return res
