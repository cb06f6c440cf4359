"""The one unlearning executor: :func:`unlearn` runs any registered method on a model through the training
loop.

``unlearn(model, tokenizer, forget, retain, cfg)`` pairs forget and retain batches each step (:mod:`.paired`),
asks the method for its named loss terms and hands them to :func:`obliviate.train.train` (full fine-tuning or
LoRA). The ``check_*`` functions refuse, before the first step, everything a user can get wrong
(docs/methods.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import torch

from obliviate.config import deep_merge, from_dict, to_dict
from obliviate.data import IDENTITY_PROMPT, as_data
from obliviate.errors import ConfigError, DataError
from obliviate.models.layers import count_passes
from obliviate.tasks.base import IDK_ANSWERS, Data, PromptFormat
from obliviate.train import TrainConfig, select_trainable, train
from obliviate.train import distributed as D
from obliviate.train.distributed import to_device
from obliviate.unlearning.contract import Method, NoReference, build_method, get_method, method_defaults
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import DEFAULT_MEMORY_GIB, checkpoint_hooks, prepare_reference
from obliviate.utils import atomic_write_text

log = logging.getLogger(__name__)


def _default_unlearn_train() -> TrainConfig:
    return TrainConfig(steps=60, lr=1e-3, schedule="constant", warmup_steps=0, grad_clip=1.0, log_every=5,
                       desc="unlearn")


@dataclass
class UnlearnConfig:
    method: str = "graddiff"
    params: dict = field(default_factory=dict)
    """Overrides of the method's config dataclass, e.g. {beta: 0.2}."""
    train: TrainConfig = field(default_factory=_default_unlearn_train)
    batch_size: int = 16
    max_len: int = 256
    """Longest training sequence in tokens (capped at the model's context length): longer documents are split
    into windows of this length (``doc_mode="chunk"``) or cut (``"cut"``); either is reported."""
    doc_mode: str = "chunk"
    lora: bool = False
    lora_r: int = 8
    lora_alpha: float = 16.0
    cache_reference: bool = True
    """Methods whose reference term is the answer log-probability of fixed sequences (NPO, IdkDPO) compute it
    once before training, and methods that read the frozen hidden states of the retain examples (the RMU
    family, the probe methods) compute those once: neither holds a reference copy
    (:mod:`obliviate.unlearning.reference`); False keeps a whole live frozen copy (the results agree)."""
    reference_memory_gib: float = DEFAULT_MEMORY_GIB
    """Cached frozen hidden states up to this size stay in memory; a larger cache is kept in a temporary
    file."""
    seed: int = 0
    allow_overlap: bool = False
    """Run although forget and retain share QA pairs or documents (a warning with the count); by default
    that contradiction is an error (:func:`check_overlap`)."""

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"config key 'batch_size': must be >= 1, got {self.batch_size}")
        if self.train.steps < 1:
            raise ConfigError(f"config key 'train.steps': must be >= 1 to unlearn (0 steps train nothing), "
                              f"got {self.train.steps}")
        if self.lora_r < 1:
            raise ConfigError(f"config key 'lora_r': must be >= 1, got {self.lora_r}")
        if not self.lora_alpha > 0:  # the adapters' scale alpha / r: 0 makes every update vanish
            raise ConfigError("config key 'lora_alpha': must be > 0 (0 scales every "
                              f"LoRA update to nothing), got {self.lora_alpha}")
        if self.max_len < 2:
            raise ConfigError(f"config key 'max_len': must be >= 2, got {self.max_len}")
        if not self.reference_memory_gib >= 0:
            raise ConfigError("config key 'reference_memory_gib': must be >= 0, got "
                              f"{self.reference_memory_gib}")
        if self.doc_mode not in ("chunk", "cut"):
            raise ConfigError(f"config key 'doc_mode': must be 'chunk' or 'cut', got {self.doc_mode!r}")


RUN_SET_BY_THE_RUN = ("method", "seed")
""":class:`UnlearnConfig` keys that a method run's settings do not take: the run names its method and seed."""

MOVED_RUN_KEYS = {"lr": "train.lr", "steps": "train.steps"}
"""Keys of the method runs' former flat schema, and the :class:`UnlearnConfig` key each is now."""


def method_settings(name: str, preset: str, seed: int = 0, lr_factor: float = 1.0) -> dict:
    """The ``unlearn`` section every run of method ``name`` starts from: its ``preset``
    (:func:`~obliviate.unlearning.contract.method_defaults`), the learning rate times ``lr_factor``: the same
    for ``obliviate unlearn`` (``unlearn.*``), a comparison (``runs.<name>``), TOFU and the papers' runs."""
    d = method_defaults(name, preset)
    base: dict = {"method": name, "seed": seed, "params": dict(d["params"])}
    if get_method(name).kind != "edit":
        base["train"] = {"steps": d["steps"], "lr": d["lr"] * lr_factor, "desc": name}  # desc: the bar label
    return base


def check_run_keys(name: str, run, prefix: str) -> None:
    """Refuse what a method run's settings ``run`` (:class:`UnlearnConfig` keys) cannot hold, naming the
    key under ``prefix``: a non-mapping, the method or the seed (the run sets them), a key of the former
    flat schema (``lr``: now ``train.lr``), and for an edit method anything but its ``params`` (it trains
    nothing)."""
    def key(rest: str) -> str:
        return f"{prefix}.{rest}" if prefix else rest

    if not isinstance(run, dict):
        raise ConfigError(f"config section '{prefix or '<root>'}' must be "
                          f"a mapping of unlearn settings, got {run!r:.80}")
    for k in run:
        if k in RUN_SET_BY_THE_RUN:
            raise ConfigError(f"config key '{key(k)}' is set by the run itself (a method run takes the keys "
                              f"of `unlearn` but {' and '.join(RUN_SET_BY_THE_RUN)}); drop it")
        if k in MOVED_RUN_KEYS:
            raise ConfigError(f"config key '{key(k)}' is '{key(MOVED_RUN_KEYS[k])}': a method run takes the "
                              "keys of `unlearn` (train.lr, train.steps, batch_size, lora, params, ...)")
    if get_method(name).kind == "edit" and (given := sorted(k for k in run if k not in EDIT_SETTINGS)):
        params = ", ".join(f.name for f in dataclasses.fields(get_method(name).config_cls))
        raise ConfigError(f"config key '{key(given[0])}' does not apply to '{name}': an edit method trains "
                          f"nothing (it takes only its params and allow_overlap; params: {params})")


def run_settings(ucfg: UnlearnConfig) -> dict:
    """The settings a run used, as its report shows them: ``lr``, ``steps``, ``batch_size``, ``lora``,
    ``params`` (an edit method: its ``params`` alone)."""
    if get_method(ucfg.method).kind == "edit":
        return {"params": dict(ucfg.params)}
    return {"lr": ucfg.train.lr, "steps": ucfg.train.steps, "batch_size": ucfg.batch_size, "lora": ucfg.lora,
            "params": dict(ucfg.params)}


def method_run_config(name: str, overrides: dict | None, preset: str, seed: int,
                      prefix: str | None = None) -> tuple[UnlearnConfig, dict]:
    """The :class:`UnlearnConfig` of method ``name``: its ``preset`` (:func:`method_settings`), then
    ``overrides`` (keys of :class:`UnlearnConfig`, as ``obliviate unlearn``'s ``unlearn.*``: ``{"train":
    {"lr": 5e-4}, "params": {"beta": 0.2}}``), checked without a model (:func:`check_unlearn_config`); also
    :func:`run_settings`, for reports. A bad key is named under ``prefix`` (default ``runs.<name>``; ``""``:
    keyword arguments)."""
    get_method(name)  # unknown names fail before any training
    prefix = f"runs.{name}" if prefix is None else prefix
    run = overrides or {}
    check_run_keys(name, run, prefix)
    base = method_settings(name, preset, seed)
    settings = deep_merge(base, {k: v for k, v in run.items() if k != "params"})
    params = run.get("params", {})
    # from_dict names it
    settings["params"] = {**base["params"], **params} if isinstance(params, dict) else params
    ucfg = from_dict(UnlearnConfig, settings, prefix=prefix)
    check_unlearn_config(ucfg, prefix=prefix)
    return ucfg, run_settings(ucfg)


def check_unused_runs(runs: dict | None, methods: list[str]) -> None:
    """Refuse ``runs.<name>`` settings for a method that is not among ``methods`` (they would be ignored),
    naming the first such key."""
    if not isinstance(runs or {}, dict):
        raise ConfigError(f"config key 'runs': expected a mapping of method names, got {runs!r:.80}")
    unused = sorted(k for k in runs or {} if k not in methods)
    if unused:
        raise ConfigError(f"config key 'runs.{unused[0]}' sets a method this run does not run "
                          f"(methods: {', '.join(methods)}); add it to methods or drop the key")


DATA_FINGERPRINT = "data_fingerprint.json"
"""The file of a run's training directory that holds the hash of the data it trains on."""


def resume_on_same_data(out_dir: str | Path | None, digest: str, resume: bool) -> bool:
    """Record ``digest`` (:meth:`PairedData.fingerprint`) in ``out_dir`` and say whether its checkpoints may
    be resumed: not when they were trained on other data (a forget file edited without changing its size),
    which one line on stderr says; the run then starts afresh."""
    if out_dir is None:
        return resume
    path = Path(out_dir) / DATA_FINGERPRINT
    try:
        before = json.loads(path.read_text()).get("data") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        before = None
    has_checkpoints = any((Path(out_dir) / "checkpoints").glob("step_*"))
    D.barrier()  # every process has read the old hash before rank 0 replaces it
    if D.is_main_process():
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"data": digest}))
    if resume and has_checkpoints and before is not None and before != digest:
        if D.is_main_process():
            log.warning("%s holds checkpoints trained on other data (the encoded forget/retain data changed: "
                        "%s -> %s); starting afresh", out_dir, before[:12], digest[:12])
        return False
    return resume


def wrap_lora(model, patterns: list[str], r: int = 8, alpha: float = 16.0):
    """LoRA adapters on the modules whose weights the method trains (all linear layers for ``["*"]``).

    Call after :func:`obliviate.train.select_trainable` with the method's patterns.
    Returns the peft model; its trainable parameters match ``"*lora_*"``.
    """
    from peft import LoraConfig, get_peft_model

    targets = [n for n, p in model.named_parameters() if p.requires_grad] if patterns != ["*"] else []
    modules = sorted({n.rsplit(".", 1)[0] for n in targets if n.endswith(".weight")})
    lcfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                      target_modules=modules if modules else "all-linear", bias="none")
    return get_peft_model(model, lcfg)


def unlearn(model, tokenizer, forget, retain, cfg: UnlearnConfig, out_dir: str | Path | None = None, *,
            prompt: PromptFormat | None = None, idk: list[str] | None = None, eval_fn=None,
            eval_every: int = 0,
            progress: bool | None = None, resume: bool = True, method: Method | None = None):
    """Unlearn ``forget`` while keeping ``retain``; returns ``(model, summary)``. The one executor.

    ``forget`` / ``retain``: a :class:`~obliviate.tasks.Data` (QA pairs and/or documents; pairs are
    rendered with ``prompt``, documents are split into ``cfg.max_len``-token windows with loss on every
    token) or a list of already formatted ``(prompt, answer)`` pairs. ``idk``: refusal answers for
    methods that need them (default :data:`IDK_ANSWERS`).

    **In place**: ``model`` itself is trained (or edited) and returned; pass a copy to keep the
    original (:func:`obliviate.api.unlearn` does). In LoRA mode the adapters are merged before
    returning, so the result is a plain model of the original architecture (a new object).

    Edit methods (``kind = "edit"``, e.g. ``ember``, ``snmf``) edit the weights without the
    training loop: the forget documents (or QA texts) are their concept sentences and the
    retain documents their neutral sentences.

    Under ``accelerate launch`` (several processes) every process builds the same
    global batches (``cfg.batch_size`` rows, split over the processes), holds its own
    frozen reference copy and sees the model unwrapped, so hooks and truncated
    forwards work as in one process; ``method.setup`` sees the whole first batch.
    Methods that cannot run so say why before training
    (:func:`obliviate.train.distributed.check_method`).

    ``summary``: the training loop's summary plus ``method``, ``method_obj``, ``trainable`` and ``data`` (what
    was encoded: QA pairs, documents, windows, tokens cut). ``method``: the method of ``cfg`` built where
    ``cfg`` was checked (:func:`check_unlearn_config`'s, by a pipeline's plan), not checked again; None:
    ``cfg`` is checked here.
    """
    method = method if method is not None else check_unlearn_config(cfg)
    forget, retain = as_data(forget), as_data(retain)
    check_overlap(forget, retain, cfg.allow_overlap, warn=True)
    if method.kind == "edit":
        return _edit(method, model, tokenizer, forget, retain, prompt)
    if method.needs_idk and forget.docs:
        raise ConfigError(f"method '{cfg.method}' needs forget QA pairs (it pairs each question with a "
                          f"refusal), but the forget data has {len(forget.docs)} "
                          "documents; use another method for documents")
    if D.world_size() > 1 or D.sharding():
        # before the frozen reference is copied: it lives on this process's device
        model.to(D.process_device())
    max_len = _max_len(model, cfg.max_len)
    winners = ((method.winners(model, tokenizer, forget, idk,
                               prompt) or idk or IDK_ANSWERS) if method.needs_idk
               else None)
    data = PairedData(tokenizer, forget, retain, cfg.batch_size, cfg.seed, max_len=max_len, prompt=prompt,
                      doc_mode=cfg.doc_mode, idk=winners)
    method.on_data({"forget": len(data.f_ids), "retain": len(data.r_ids),
                    "steps_per_epoch": data.f_sampler.per_epoch,
                    "steps": cfg.train.steps})
    _report_cuts(data.stats)
    patterns = method.trainable(model)
    select_trainable(model, patterns)  # validates patterns before anything else happens
    if cfg.lora:
        check_lora_rank(model, patterns, cfg.lora_r)
    # the passes before step 0 (a probe fitted, a frozen copy's outputs cached) are the method's cost too
    with count_passes(model) as before:
        method.fit(model, tokenizer)  # e.g. probe directions fitted on the frozen model before training
    D.check_method(method)  # several processes / sharded: refuse what cannot work, before any training
    device = next(model.parameters()).device
    if cfg.lora:
        model = wrap_lora(model, patterns, cfg.lora_r, cfg.lora_alpha)
        patterns = ["*lora_*"]
    with count_passes(model) as setup:
        ref = prepare_reference(method, model, data, to_device(data(0), device), lora=cfg.lora,
                                cache=cfg.cache_reference,
                                steps=cfg.train.steps, memory_bytes=int(cfg.reference_memory_gib * 2**30))
    ref = ref or NoReference(cfg.method)
    tcfg = TrainConfig(**{**to_dict(cfg.train), "trainable": patterns,
                          **({"progress": progress} if progress is not None else {})})
    hooks = checkpoint_hooks(method, ref)
    resume = resume_on_same_data(out_dir, data.fingerprint(), resume)
    # a frozen copy, or None (cached or no reference)
    held = None if isinstance(ref, NoReference) else ref.model
    with count_passes(model, held) as passes:  # the method's cost, its reference's included
        summary = train(model, lambda m, b, s: method.loss(m, to_device(b, device), ref), data, tcfg, out_dir,
                        eval_fn=eval_fn, eval_every=eval_every, resume=resume, state_hooks=hooks)
    if cfg.lora:
        model = model.merge_and_unload()
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    summary["method"] = cfg.method
    summary["method_obj"] = method
    summary["trainable"] = patterns
    summary["reference"] = ref.kind if ref else "none"  # what was held of the frozen model, chosen by size
    summary["data"] = data.stats
    # forwards and backwards of the training steps (``eval_fn``'s included) and of the setup before them
    summary["passes"] = {k: v + before[k] + setup[k] for k, v in passes.items()}
    return model, summary


EDIT_SETTINGS = ("method", "params", "seed", "allow_overlap")
"""The :class:`UnlearnConfig` keys an edit method reads; any other key set away from its default is
refused."""


def check_unlearn_config(cfg: UnlearnConfig, prefix: str = "unlearn") -> Method:
    """Everything about ``cfg`` that can be checked without a model; returns the built method. A bad key is
    named as the user typed it: under ``prefix``, where ``cfg`` was given (``unlearn`` in a command's config,
    ``runs.<name>`` in a comparison's, ``""`` for the Python API's keyword arguments).

    An edit method (``snmf``, ``ember``) trains nothing: a training, LoRA, batch or length setting given
    to it (``lr``, ``lora``, ``batch_size``, ``max_len``, ...) is an error naming it, not ignored."""
    def key(rest: str) -> str:
        return f"{prefix}.{rest}" if prefix else rest

    method = build_method(cfg.method, cfg.params, prefix=key("params"))
    if method.kind == "edit":
        default = UnlearnConfig()
        for f in dataclasses.fields(UnlearnConfig):
            if f.name in EDIT_SETTINGS:
                continue
            mine, base = getattr(cfg, f.name), getattr(default, f.name)
            if f.name == "train":
                changed = sorted(k for k, v in to_dict(mine).items() if to_dict(base)[k] != v)
                if changed:
                    raise ConfigError(f"config key '{key('train.' + changed[0])}' does not apply to "
                                      f"'{cfg.method}': an edit method trains nothing "
                                      "(it takes only its params and allow_overlap)")
            elif mine != base:
                raise ConfigError(f"config key '{key(f.name)}' ({mine!r}) does not apply to '{cfg.method}': "
                                  "an edit method trains nothing (it takes "
                                  "only its params and allow_overlap)")
        return method
    if list(cfg.train.trainable) != ["*"]:
        raise ConfigError(f"config key '{key('train.trainable')}' ({cfg.train.trainable}) cannot be set for "
                          f"unlearning: the method '{cfg.method}' chooses the parameters it trains "
                          "(see its layer parameters)")
    return method


def check_overlap(forget, retain, allow: bool = False, *, warn: bool = False) -> int:
    """The number of forget QA pairs and documents also in ``retain`` (the same question and answer, the
    same text). Contradictory data, so an error naming the count, unless ``allow`` (config key
    ``allow_overlap``); then ``warn`` says the count on stderr (:func:`unlearn` does, once)."""
    forget, retain = as_data(forget), as_data(retain)
    qa = {(q.strip(), a.strip()) for q, a in retain.qa}
    docs = {d.strip() for d in retain.docs}
    n_qa = sum((q.strip(), a.strip()) in qa for q, a in forget.qa)
    n_docs = sum(d.strip() in docs for d in forget.docs)
    if not n_qa and not n_docs:
        return 0
    parts = ([f"{n_qa} of {len(forget.qa)} forget QA pairs"] if n_qa else []) + \
        ([f"{n_docs} of {len(forget.docs)} forget documents"] if n_docs else [])
    msg = f"{' and '.join(parts)} are also in the retain data: the run would be told to forget and keep them"
    if not allow:
        raise DataError(f"{msg}; give disjoint forget and retain data, or set allow_overlap=true "
                        "(unlearn.allow_overlap=true) to run anyway")
    if warn and D.is_main_process():
        log.warning("%s (allow_overlap=true)", msg)
    return n_qa + n_docs


def check_unlearn_data(tokenizer, forget, retain, cfg: UnlearnConfig, *, prompt: PromptFormat | None = None,
                       max_len: int | None = None) -> "PairedData":
    """The encoded forget/retain data of a training run, checked before any model is needed: the overlap
    (:func:`check_overlap`) and lengths that leave a side with no token to train on (``max_len`` that
    cuts every answer away). ``max_len``: the length used (default ``cfg.max_len``)."""
    check_overlap(forget, retain, cfg.allow_overlap)
    return PairedData(tokenizer, forget, retain, cfg.batch_size, cfg.seed, max_len=max_len or cfg.max_len,
                      prompt=prompt, doc_mode=cfg.doc_mode)


def check_unlearn_run(model, tokenizer, forget, retain, cfg: UnlearnConfig, *,
                      prompt: PromptFormat | None = None, method: Method | None = None) -> None:
    """What :func:`unlearn` would refuse before its first step, checked without training: the config (unless
    its built ``method`` is given: checked already), the data (overlap; lengths at the model's context that
    leave nothing to train), the layers the method trains and the LoRA rank. A command runs it after loading
    the model and before it prepares ``--out``."""
    method = method if method is not None else check_unlearn_config(cfg)
    method.check(model)  # the method's own checks against the model (e.g. an edit method's layers)
    if method.kind == "edit":
        check_overlap(forget, retain, cfg.allow_overlap)
        return
    check_unlearn_data(tokenizer, forget, retain, cfg, prompt=prompt, max_len=_max_len(model, cfg.max_len))
    patterns = method.trainable(model)  # a layer out of range is refused here
    if cfg.lora:
        check_lora_rank(model, patterns, cfg.lora_r)


def check_lora_rank(model, patterns: list[str], r: int) -> None:
    """Refuse a LoRA rank above the smallest width of the linear layers the adapters go on (an allocator
    error or a meaningless factorisation otherwise), naming ``lora_r`` and that width."""
    widths = [min(m.in_features, m.out_features) for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and any(fnmatch(f"{n}.weight", p) for p in patterns)]
    if widths and r > min(widths):
        raise ConfigError(f"config key 'lora_r': must be at most the width of the layers it adapts "
                          f"({min(widths)}), got {r}")


def _max_len(model, wanted: int) -> int:
    """``wanted``, capped at the model's context length when it declares one."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None) or \
        getattr(getattr(model, "config", None), "n_positions", None)
    return min(wanted, int(limit)) if isinstance(limit, int) and limit > 1 else wanted


def _report_cuts(stats: dict) -> None:
    """Log what was done to sequences longer than ``max_len`` (never silently; the command line shows it)."""
    for side in ("forget", "retain"):
        st = stats[side]
        if st["docs"] and st["doc_windows"] > st["docs"]:
            log.info("%s documents longer than %d tokens were split into windows: %d documents -> %d "
                     "windows (config key 'max_len')", side, stats["max_len"], st["docs"], st["doc_windows"])
        if st["tokens_cut"]:
            log.info("%s documents cut to %d tokens: %d tokens dropped (doc_mode=cut; config "
                     "keys 'max_len', 'doc_mode')", side, stats["max_len"], st["tokens_cut"])
        if st["qa_cut"]:
            lost = f", {st['qa_no_answer']} of them to no answer token" if st.get("qa_no_answer") else ""
            log.warning("%d %s QA pairs longer than %d tokens were cut%s "
                        "(config key 'max_len')", st["qa_cut"], side,
                        stats["max_len"], lost)


def _edit(method: Method, model, tokenizer, forget: Data, retain: Data, prompt: PromptFormat | None):
    """Run an edit method: its concept sentences are the forget texts, its neutral sentences the retain
    texts."""
    fmt = prompt or IDENTITY_PROMPT

    def texts(d: Data) -> list[str]:
        return list(d.docs) + [p + a for p, a in fmt.pairs(d.qa, tokenizer)]

    info = method.edit(model, tokenizer,
                       {"concept_sentences": texts(forget), "neutral_sentences": texts(retain)})
    model.eval()
    return model, {"method": method.name, "method_obj": method, "edit": info, "history": [], "trainable": [],
                   "data": {"forget": {"qa": len(forget.qa), "docs": len(forget.docs)},
                            "retain": {"qa": len(retain.qa), "docs": len(retain.docs)}}}


def method_runner(tokenizer, forget: list[tuple[str, str]] | None = None,
                  retain: list[tuple[str, str]] | None = None,
                  cfg=None, *, edit_data: dict | None = None, params: dict | None = None,
                  out_dir: str | Path | None = None, progress: bool | None = False):
    """``fn(name, model) -> (model, record)`` that runs any registered method on ``model``: the second stage
    of :func:`obliviate.methods.ember.combine.ember_then`.

    Training methods: ``unlearn(model, tokenizer, forget, retain, cfg with method=name)``
    (``cfg`` an :class:`UnlearnConfig`; its ``params`` are used unless
    ``params`` is given). Edit methods: ``build_method(name, params).edit(model, tokenizer, edit_data)``.
    """
    def run(name: str, model: torch.nn.Module) -> tuple[torch.nn.Module, dict]:
        if get_method(name).kind == "edit":
            if edit_data is None:
                raise ConfigError(f"method {name!r} is an edit method: give "
                                  "edit_data (concept/neutral sentences)")
            return model, build_method(name, params).edit(model, tokenizer, edit_data)
        if forget is None or retain is None:
            raise ConfigError(f"method {name!r} trains: give forget and retain pairs")
        ucfg = cfg or UnlearnConfig()
        ucfg = dataclasses.replace(ucfg, method=name, params=ucfg.params if params is None else params)
        model, summary = unlearn(model, tokenizer, forget, retain, ucfg, out_dir, progress=progress)
        return model, {k: v for k, v in summary.items() if k != "method_obj"}

    return run
