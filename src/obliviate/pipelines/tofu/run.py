"""The TOFU protocol (Maini et al. 2024), ``obliviate tofu``: the ``tofu:<forget>`` task
(:mod:`obliviate.tasks.tofu`) and its metric set (:func:`obliviate.eval.tofu.tofu_metrics`), on tiny
models trained here or on two given ones. The steps, the cache and the results are described in
docs/tofu.md.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.config import config_hash, from_dict, to_dict
from obliviate.data import collate, encode_prompt_answer
from obliviate.errors import ConfigError, DataError, ModelError
from obliviate.eval.tofu import (TINY_SCALE_NOTE, TOFU_MAX_NEW_TOKENS, TOFU_MIA_K, TOFU_REPORT_METRICS,
                                 TOFU_SETS,
                                 forget_quality, report_notes, tofu_metrics)
from obliviate.losses import lm_loss_labelled
from obliviate.unlearning.engine import method_run_config, unlearn
from obliviate.models.load import check_vocab, load_model, load_tokenizer
from obliviate.models.builders import TinyModelConfig, build_tiny_model
from obliviate.models.tokenizer import ensure_pad_token, save_tokenizer, train_tokenizer
from obliviate.runs.parts import cached_part
from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results
from obliviate.tasks import Task, load_task
from obliviate.tasks.sources._io import root_dir
from obliviate.tasks.tofu import RETAIN_OF, load_tofu, tofu_prompt
from obliviate.train import StepSampler, TrainConfig, train
from obliviate.train import distributed as D
from obliviate.train.backend import can_checkpoint
from obliviate.utils import cache_dir, looks_like_path, recorded_path, seed_everything

FORGET_SPLITS = RETAIN_OF
"""The forget splits the protocol unlearns (``forget``), each with TOFU's retain split (together:
``full``)."""
EVAL_SPLITS = {"forget": "forget10_perturbed", "retain": "retain_perturbed",
               "real_authors": "real_authors_perturbed", "world_facts": "world_facts_perturbed"}
"""The files of the four sets the TOFU metrics read for ``forget10`` (:func:`eval_splits` for any forget
split; the task's ``meta["perturbed"]``)."""
TOKENIZER_SPLITS = ("full", "forget01_perturbed", "forget05_perturbed", "forget10_perturbed",
                    "retain_perturbed",
                    "real_authors", "real_authors_perturbed", "world_facts", "world_facts_perturbed")
"""The TOFU files whose text the tiny models' tokenizer is trained on."""
TASK_MCQ_SPLITS = ("real_authors", "world_facts")
"""The files of the tofu task's MCQ sets (read with the task, not scored by the TOFU metrics)."""


def eval_splits(forget: str = "forget10") -> dict[str, str]:
    """The evaluation sets: ``<forget>_perturbed``, ``retain_perturbed``, real authors and world facts."""
    return {**EVAL_SPLITS, "forget": f"{forget}_perturbed"}


def required_files(forget: str = "forget10", given: bool = False) -> tuple[str, ...]:
    """Every TOFU file the protocol reads (without ``.json``): the ``tofu:<forget>`` task's and, for tiny
    models (not ``given``), the tokenizer's text, ``full`` among it."""
    qa = (forget, FORGET_SPLITS[forget]) if given else ("full", FORGET_SPLITS[forget], forget)
    rest = TASK_MCQ_SPLITS if given else TOKENIZER_SPLITS
    return tuple(dict.fromkeys(qa + tuple(eval_splits(forget).values()) + rest))


REQUIRED_FILES = required_files()
"""Every TOFU file the tiny-model protocol reads for ``forget10``."""


def tofu_model_config() -> TinyModelConfig:
    """The tiny TOFU model: 2 layers of width 256, a BPE vocabulary of at most 4,096 trained on TOFU text, 512
    positions (longer prompt + answer sequences are cut when fine-tuning)."""
    return TinyModelConfig(n_layer=2, d_model=256, n_head=4, vocab_size=4096, max_len=512)


@dataclass
class TofuConfig:
    seed: int = 0
    method: str = "graddiff"
    """Unlearning method (``obliviate methods``)."""
    forget: str = "forget10"
    """The forget split unlearned: ``forget01``, ``forget05`` or ``forget10`` (retain split:
    :data:`FORGET_SPLITS`)."""
    model: TinyModelConfig = field(default_factory=tofu_model_config)
    """The tiny models' shape and vocabulary (:func:`tofu_model_config`)."""
    epochs: int = 20
    """Fine-tuning epochs for both base models. 30 epochs gave forget10 ROUGE-L 0.9996 (2 cores:
    20.5 min for ``full``); 20 keep the whole protocol well inside 45 minutes (docs/tofu.md)."""
    lr: float = 1e-3
    batch_size: int = 16
    warmup_steps: int = 100
    weight_decay: float = 0.0
    checkpoint_every: int = 500
    """Fine-tuning checkpoint interval (steps): an interrupted run resumes from here."""
    limit: int | None = None
    """Use only the first N records of each TOFU split (tests)."""
    unlearn: dict = field(default_factory=dict)
    """The unlearning run's settings, as ``obliviate unlearn``'s: ``unlearn.train.lr``,
    ``unlearn.train.steps``, ``unlearn.batch_size``, ``unlearn.params.beta``."""
    eval_batch_size: int = 32
    max_new_tokens: int = TOFU_MAX_NEW_TOKENS
    """Greedy tokens generated per answer for ROUGE-L: 200, TOFU's and OpenUnlearning's budget (was 128)."""
    data: str | None = None
    """Data directory (default ``$OBLIVIATE_DATA``, else ``../shared/data``)."""

    def __post_init__(self):
        for key in ("epochs", "batch_size", "eval_batch_size", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be >= 1, got {getattr(self, key)}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"config key 'limit': must be >= 1, got {self.limit}")
        if self.lr <= 0:
            raise ConfigError(f"config key 'lr': must be > 0, got {self.lr}")
        if self.forget not in FORGET_SPLITS:
            raise ConfigError(f"config key 'forget': unknown forget split {self.forget!r} "
                              f"(valid: {', '.join(FORGET_SPLITS)})")

    @property
    def retain(self) -> str:
        """The retain split of :attr:`forget` (``retain90`` for ``forget10``)."""
        return FORGET_SPLITS[self.forget]


# ------------------------------------------------------------------ data

def check_tofu_data(root=None, files=REQUIRED_FILES) -> Path:
    """The ``tofu/`` directory, or a :class:`DataError` naming which of ``files`` (:func:`required_files`) it
    lacks."""
    d = root_dir(root) / "tofu"
    missing = [f"{s}.json" for s in files if not (d / f"{s}.json").is_file()]
    if missing:
        raise DataError(f"TOFU data not found: {d} lacks {', '.join(missing)} "
                        "(set $OBLIVIATE_DATA to the data directory, or config key 'data')")
    return d


def protocol_task(cfg: TofuConfig) -> Task:
    """The ``tofu:<forget>`` task the protocol unlearns and evaluates, every set cut to ``cfg.limit``
    records."""
    return load_task(f"tofu:{cfg.forget}", root=cfg.data, limit=cfg.limit, seed=cfg.seed)


def base_train_pairs(task: Task, which: str, limit: int | None) -> list[tuple[str, str]]:
    """Fine-tuning pairs (prompt, answer) of the ``"full"`` model or the retain-only one (``which`` = the
    task's retain split). ``full`` is TOFU's retain split followed by its forget split (its file in that
    order); with ``limit`` it is ``forget[:limit] + retain[:limit]``, so that the forget examples the base
    model is evaluated on are in its training data (tests)."""
    if which == task.meta["retain_split"]:
        return task.prompt.pairs(task.retain.qa)
    if which != "full":
        raise ValueError(which)
    qa = task.forget.qa + task.retain.qa if limit is not None else task.retain.qa + task.forget.qa
    return task.prompt.pairs(qa)


def tokenizer_texts(root, limit: int | None) -> list[str]:
    """All TOFU QA text (:data:`TOKENIZER_SPLITS`, each cut to ``limit`` records): questions in the prompt
    format with their answers, paraphrases, perturbed answers and options."""
    texts = []
    for split in TOKENIZER_SPLITS:
        for ex in load_tofu(split, root=root)[:limit]:
            texts.append(f"{tofu_prompt(ex.question)} {ex.answer}")
            texts += [t for t in (ex.paraphrased_question, ex.paraphrased_answer) if t]
            texts += list(ex.perturbed_answers or []) + list(ex.options or [])
    return texts


def _digest(texts) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------ cached pieces

def tofu_tokenizer(texts: list[str], vocab_size: int):
    """Train (or load from the cache) the tokenizer on ``texts`` (:func:`tokenizer_texts`); returns
    (tokenizer, key)."""
    key = f"{_digest(texts)}-{vocab_size}"
    path = cache_dir() / "tofu" / "tokenizers" / key
    with D.main_process_first():  # several processes: rank 0 trains and caches it, the others load it
        if not (path / "tokenizer.json").exists():
            tmp = path.with_name(path.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            save_tokenizer(train_tokenizer(texts, vocab_size=vocab_size), tmp)
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
    return load_tokenizer(str(path)), key


def finetune_key(cfg: TofuConfig, which: str, tokenizer_key: str, pairs) -> dict:
    """Everything a fine-tuned base model depends on (its cache key is the hash of this)."""
    return {"which": which, "seed": cfg.seed, "model": to_dict(cfg.model), "epochs": cfg.epochs, "lr": cfg.lr,
            "batch_size": cfg.batch_size, "warmup_steps": cfg.warmup_steps, "weight_decay": cfg.weight_decay,
            "limit": cfg.limit, "tokenizer": tokenizer_key, "batches": "length-grouped",
            "data": _digest(p + a for p, a in pairs)}


def cached_finetune(cfg: TofuConfig, which: str, tokenizer, tokenizer_key: str, pairs,
                    progress: bool | None = None) -> tuple[Path, bool]:
    """Fine-tune a tiny model from scratch on ``pairs`` once per config; returns (dir holding ``model/``,
    trained now).

    The directory is a model cache entry like pretraining's (resumable checkpoints, ``DONE`` when
    finished); under ``accelerate launch`` each process trains on its rows of each global batch and
    only rank 0 writes it.
    """
    key = finetune_key(cfg, which, tokenizer_key, pairs)
    root = cache_dir() / "tofu" / config_hash(key)
    if (root / "DONE").exists() and (root / "model" / "config.json").exists():
        return root, False
    D.barrier()  # every process has looked for DONE before rank 0 writes into the entry
    root.mkdir(parents=True, exist_ok=True)
    if D.is_main_process():
        (root / "config.json").write_text(json.dumps(key, indent=2, sort_keys=True))
    seed_everything(cfg.seed)
    model, _ = build_tiny_model(tokenizer, cfg.model, seed=cfg.seed)
    ids, masks = encode_prompt_answer(tokenizer, [p for p, _ in pairs], [a for _, a in pairs],
                                      cfg.model.max_len)
    sampler = StepSampler(len(ids), cfg.batch_size, cfg.seed, lengths=[len(x) for x in ids])
    steps = cfg.epochs * sampler.per_epoch
    pad = tokenizer.pad_token_id

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        return collate([ids[i] for i in idx], pad, label_mask=[masks[i] for i in idx])

    tcfg = TrainConfig(steps=steps, lr=cfg.lr, warmup_steps=min(cfg.warmup_steps, steps // 10),
                       schedule="cosine", min_lr_ratio=0.1, weight_decay=cfg.weight_decay, grad_clip=1.0,
                       log_every=max(1, min(50, steps // 20)),
                       # none under DeepSpeed
                       checkpoint_every=cfg.checkpoint_every if can_checkpoint() else 0,
                       desc=f"tofu {which}", **({"progress": progress} if progress is not None else {}))
    train(model, lambda mdl, b, s: {"qa": lm_loss_labelled(mdl, b)}, batch_fn, tcfg, root, resume=True)
    model.eval()
    D.save_trained(model, root / "model", tokenizer)
    if D.is_main_process():
        shutil.rmtree(root / "checkpoints", ignore_errors=True)
        (root / "DONE").write_text("ok\n")
    D.barrier()
    return root, True


def evaluate(model, tokenizer, task: Task, cfg: TofuConfig, reference_model=None) -> dict:
    """The TOFU metric set of ``model`` on the protocol's task (:func:`obliviate.eval.tofu.tofu_metrics`, no
    forget quality), with ``cfg``'s batch size and generation length; ``reference_model`` (the retain model)
    is ``mia_reference``'s."""
    return tofu_metrics(model, tokenizer, task, batch_size=cfg.eval_batch_size,
                        max_new_tokens=cfg.max_new_tokens,
                        reference_model=reference_model)


def needs_reference(task: Task) -> bool:
    """Whether the report computes ``mia_auc_reference`` (it needs TOFU's holdout split), so that the retain
    model is loaded as the reference."""
    return bool(task.holdout)


def cached_evaluate(root: Path, tokenizer, task: Task, cfg: TofuConfig,
                    reference_root: Path | None = None) -> dict:
    """:func:`evaluate` of the cached model in ``root/model`` (``reference_root/model``: the reference
    model, where the task has a holdout split), a part stored next to it
    (:func:`obliviate.runs.parts.cached_part`, keyed by the evaluation sets, the holdout, the reference,
    the report's metrics and the generation length)."""
    perturbed = task.meta["perturbed"]
    reference_root = reference_root if needs_reference(task) else None
    key = {"eval": {k: _digest(json.dumps(ex.to_dict(),
                                          sort_keys=True) for ex in perturbed[k]) for k in TOFU_SETS},
           "max_new_tokens": cfg.max_new_tokens, "metrics": list(TOFU_REPORT_METRICS), "mia_k": TOFU_MIA_K,
           "holdout": _digest(p + a for p, a in task.holdout.qa) if task.holdout else None,
           "reference": str(reference_root) if reference_root else None}

    def run():
        ref = load_model(str(reference_root / "model")) if reference_root else None
        return evaluate(load_model(str(root / "model")), tokenizer, task, cfg, reference_model=ref)

    res, _ = cached_part(root / f"eval-{config_hash(key)}.json", key, run)
    return res


def unlearn_config(cfg: TofuConfig):
    """The :class:`~obliviate.unlearning.engine.UnlearnConfig` of ``cfg.method``: the method's "tiny" preset
    (the TOFU models trained here are tiny), then ``cfg.unlearn``
    (:func:`~obliviate.unlearning.engine.method_run_config`)."""
    return method_run_config(cfg.method, cfg.unlearn, "tiny", cfg.seed, prefix="unlearn")[0]


# ------------------------------------------------------------------ the protocol

@dataclass
class GivenModels:
    """Two fine-tuned models to start from instead of training tiny ones (``obliviate tofu --model``)."""

    model: str
    """The model fine-tuned on TOFU ``full`` (a local directory or a hub id): evaluated, then unlearned."""
    retain_model: str
    """The same base model fine-tuned on the retain split only (TOFU's retain model): forget quality's
    reference."""
    tokenizer: str | None = None
    """Tokenizer directory or hub id (default: ``model``'s); it must fit both models."""
    pad_policy: str = "error"
    """For a tokenizer without a pad token: ``"error"``, or ``"eos"`` to pad with eos."""

    def __post_init__(self):
        if self.pad_policy not in ("error", "eos"):
            raise ConfigError(f"pad policy {self.pad_policy!r} is not one of 'error', 'eos'")


TINY_ONLY_KEYS = ("model", "epochs", "lr", "batch_size", "warmup_steps", "weight_decay", "checkpoint_every")
"""Config keys that configure training the tiny models (``model`` with its subkeys): refused with
:class:`GivenModels`."""


def _tiny_training_settings(cfg: TofuConfig) -> dict:
    """``{dotted key: value}`` of :data:`TINY_ONLY_KEYS`."""
    flat = {f"model.{k}": v for k, v in to_dict(cfg.model).items()}
    return {**flat, **{k: getattr(cfg, k) for k in TINY_ONLY_KEYS if k != "model"}}

_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def check_source(source: str, what: str, files: tuple[str, ...]) -> None:
    """ModelError unless ``source`` is a local directory holding one of ``files``, or looks like a hub id
    (``org/name``); nothing is loaded."""
    p = Path(source)
    if p.exists() or looks_like_path(source):
        if not p.is_dir():
            raise ModelError(f"{what} {source!r} is not a directory" if p.exists()
                             else f"{what} directory {source!r} does not exist")
        if not any((p / f).is_file() for f in files):
            raise ModelError(f"{what} directory {source!r} has no {' or '.join(files)}")
    elif not _HUB_ID.fullmatch(source):
        raise ModelError(f"{what} {source!r} is neither a local directory nor a hub id like 'org/name'")


def check_run(cfg: TofuConfig, out: str | Path | None = None, given: GivenModels | None = None) -> None:
    """What :func:`run_tofu` checks before it loads or trains anything: the method and its unlearning
    overrides, the data files, and (``given``) that no tiny-model training key is set and that each model and
    tokenizer is a local directory with the right files or a hub id."""
    unlearn_config(cfg)  # the settings and the method's params, before any model
    check_tofu_data(cfg.data, required_files(cfg.forget, given is not None))
    if given is None:
        return
    default = _tiny_training_settings(TofuConfig())
    for key, value in _tiny_training_settings(cfg).items():
        if value != default[key]:
            raise ConfigError(f"config key '{key}' configures training the tiny models; with given models "
                              "(--model) nothing is trained")
    check_source(given.model, "model", ("config.json",))
    check_source(given.retain_model, "retain model", ("config.json",))
    check_source(given.tokenizer or given.model, "tokenizer", ("tokenizer.json", "tokenizer_config.json"))
    for src in (given.model, given.retain_model):
        if out is not None and Path(src).is_dir() and (Path(out) / "model").resolve() == Path(src).resolve():
            raise ConfigError(f"--out {out}: the unlearned model would overwrite the given model {src}")


@dataclass
class TofuBases:
    """The protocol's base and retain-only models with their evaluations, shared by every method run on them
    (:func:`prepare_bases`, :func:`given_bases`)."""

    task: Task
    """The ``tofu:<forget>`` task (:func:`protocol_task`): what is unlearned and evaluated."""
    tokenizer: object
    roots: dict
    """``{"base": ..., "retain_model": ...}`` (``results.json``'s ``base_dirs``): for tiny models the cache
    directory holding ``model/``, for given models the directory or hub id given."""
    metrics: dict
    """TOFU metrics of ``base`` (with ``forget_quality``) and ``retain_model``."""
    per_example: dict
    """Per-example forget truth ratios and greedy answers of both models."""
    timings: dict
    models: dict = field(default_factory=dict)
    """What :meth:`load` loads each model from, where it is not ``roots[name] / "model"``."""

    @property
    def notes(self) -> list[str]:
        """What the report leaves out, one line each (:func:`obliviate.eval.tofu.report_notes`): no holdout
        split (the file looked for), and that the retain model, the reference of ``mia_reference``, has none
        itself."""
        lines = report_notes(self.task)
        if not lines:
            lines.append("mia_auc_reference: the retain model is the "
                         "reference model, so it has no reference score")
        return lines

    def reference(self):
        """The reference model of ``mia_reference`` (the retain model), or None where the task has no
        holdout."""
        return self.load("retain_model", device=D.process_device()) if needs_reference(self.task) else None

    @property
    def retain_truth_ratios(self) -> list:
        """Forget-set truth ratios of the retain-only model: forget quality is measured against these."""
        return self.per_example["retain_model"]["forget_truth_ratio"]

    def load(self, name: str, device=None):
        """Load ``"base"`` or ``"retain_model"`` (checked against :attr:`tokenizer`)."""
        path = str(self.models.get(name) or Path(self.roots[name]) / "model")
        model = load_model(path, device=device)
        check_vocab(model, self.tokenizer, path)
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = self.tokenizer.pad_token_id
        return model

    def add_evaluations(self, evals: dict) -> TofuBases:
        """Store both models' :func:`evaluate` results (the base model's with forget quality); returns
        self."""
        for name, res in evals.items():
            self.per_example[name] = res.pop("per_example")
            self.metrics[name] = res
        self.metrics["base"]["forget_quality"] = forget_quality(
            self.per_example["base"]["forget_truth_ratio"], self.retain_truth_ratios)
        return self


def prepare_bases(cfg: TofuConfig, progress: bool | None = None) -> TofuBases:
    """Steps 1-3 of the protocol: data, tokenizer, both fine-tuned tiny models and their evaluations (all
    cached)."""
    task = protocol_task(cfg)
    t = time.time()
    tok, tok_key = tofu_tokenizer(tokenizer_texts(cfg.data, cfg.limit), cfg.model.vocab_size)
    bases = TofuBases(task=task, tokenizer=tok, roots={}, metrics={}, per_example={},
                      timings={"tokenizer_s": time.time() - t})
    for name, which in (("base", "full"), ("retain_model", cfg.retain)):
        t = time.time()
        bases.roots[name], trained = cached_finetune(cfg, which, tok, tok_key,
                                                     base_train_pairs(task, which, cfg.limit),
                                                     progress=progress)
        bases.timings[f"{name}_finetune_s"] = time.time() - t
        bases.timings[f"{name}_cached"] = not trained
    evals = {}
    for name, reference in (("base", bases.roots["retain_model"]), ("retain_model", None)):
        t = time.time()  # the base model's report needs the retain model: both are trained first
        evals[name] = cached_evaluate(bases.roots[name], tok, task, cfg, reference_root=reference)
        bases.timings[f"{name}_eval_s"] = time.time() - t
    return bases.add_evaluations(evals)


def given_bases(cfg: TofuConfig, given: GivenModels) -> TofuBases:
    """:func:`prepare_bases` for two given models: data, tokenizer and both models' evaluations (nothing is
    trained or cached; :func:`check_run` checks the paths first)."""
    task = protocol_task(cfg)
    tok = ensure_pad_token(load_tokenizer(given.tokenizer or given.model), policy=given.pad_policy)
    roots = {"base": given.model, "retain_model": given.retain_model}
    bases = TofuBases(task=task, tokenizer=tok, roots=roots, metrics={}, per_example={}, timings={},
                      models=dict(roots))
    evals = {}
    for name in roots:
        t = time.time()
        ref = bases.reference() if name == "base" else None
        evals[name] = evaluate(bases.load(name, device=D.process_device()), tok, task, cfg,
                               reference_model=ref)
        del ref
        bases.timings[f"{name}_eval_s"] = time.time() - t
    return bases.add_evaluations(evals)


def unlearn_and_evaluate(cfg: TofuConfig, bases: TofuBases, out_dir: str | Path | None,
                         progress: bool | None = None) -> tuple:
    """Steps 4-5 for ``cfg.method`` on the base model: returns (model, metrics, per_example, timings,
    training summary).

    ``metrics`` has every scalar of :func:`evaluate` plus ``forget_quality``; ``out_dir``
    receives the unlearning run's logs (None: none written).
    """
    ucfg = unlearn_config(cfg)
    timings: dict = {}
    t = time.time()
    seed_everything(cfg.seed)
    model = bases.load("base")
    task = bases.task
    model, summary = unlearn(model, bases.tokenizer, task.prompt.pairs(task.forget.qa),
                             task.prompt.pairs(task.retain.qa), ucfg, out_dir, progress=progress,
                             resume=False)
    timings["unlearn_s"] = time.time() - t
    t = time.time()
    res = evaluate(model, bases.tokenizer, task, cfg, reference_model=bases.reference())
    timings["method_eval_s"] = time.time() - t
    per_example = res.pop("per_example")
    res["forget_quality"] = forget_quality(per_example["forget_truth_ratio"], bases.retain_truth_ratios)
    return model, res, per_example, timings, summary


def run_tofu(cfg: TofuConfig, out: str | Path, progress: bool | None = None,
             given: GivenModels | None = None) -> dict:
    """Run the protocol for ``cfg.method`` on tiny models trained here or, with ``given``, on two given
    models; write the run directory ``out`` (prepared here, after the checks): ``results.json``,
    ``per_example.json`` and the unlearned model in ``model/``.

    Returns ``{"metrics", "per_example", "timings"}``.
    """
    check_run(cfg, out, given)  # a bad method, data file or path fails before anything is loaded or trained
    out = prepare_out_dir(out)
    ucfg = unlearn_config(cfg)
    t_all = time.time()
    bases = given_bases(cfg, given) if given else prepare_bases(cfg, progress)
    model, res, per, tims, summary = unlearn_and_evaluate(cfg, bases, out / "unlearn", progress)
    metrics = {**bases.metrics, cfg.method: res}
    per_example = {**bases.per_example, cfg.method: per}
    timings = {**bases.timings, **tims}
    D.save_trained(model, out / "model", bases.tokenizer)  # rank 0 writes, in one process or several
    timings["total_s"] = time.time() - t_all
    if D.is_main_process():
        atomic_write_json(out / "per_example.json", per_example)
    paths = ("model", "retain_model", "tokenizer")  # recorded absolute, as every path in results.json
    write_results(out, seed=cfg.seed, config={**to_dict(cfg), "data": recorded_path(cfg.data)},
                  metrics=metrics,
                  timings=timings, unlearn_config=to_dict(ucfg),
                  base_dirs={k: str(v) for k, v in bases.roots.items()},
                  model_dir=str(out / "model"), notes=bases.notes, task=bases.task,
                  **({"given_models": {k: recorded_path(v) if k in paths else v for k,
                                       v in to_dict(given).items()}}
                     if given else {"scale_note": TINY_SCALE_NOTE}))
    return {"metrics": metrics, "per_example": per_example, "timings": timings, "notes": bases.notes}


def tofu_config(**overrides) -> TofuConfig:
    """A :class:`TofuConfig` from nested keyword overrides (e.g. ``model={"d_model": 32}``, ``limit=20``)."""
    return from_dict(TofuConfig, copy.deepcopy(overrides))
