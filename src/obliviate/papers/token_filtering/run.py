"""The token-filtering recipe's experiments (see :mod:`obliviate.papers.token_filtering`); claims and
report are in their own modules."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from obliviate.attacks.adversarial import loss_recovery_curve
from obliviate.attacks.relearn import recovery_cost
from obliviate.config import to_dict
from obliviate.data import TokenDataset, encode_documents, pack_sequences
from obliviate.errors import ConfigError, DataError
from obliviate.eval import token_loss_by_label
from obliviate.unlearning.engine import method_run_config, unlearn
from obliviate.filtering import (
    FILTERED_MODELS,
    TokenClassifierConfig,
    WeakLabelConfig,
    add_label_noise,
    apply_strategy,
    domain_runs,
    fit_token_classifiers,
    flags_from_probs,
    flatten,
    ground_truth,
    loss_weights,
    make_batch_fn,
    pack_filtered,
    sae_weak_labels,
    split_flat,
    tokens_for,
    tokens_to_recover,
)
from obliviate.filtering.refusal import refusal_training
from obliviate.filtering.scaling import compute_slowdown, fit_power_law, training_flops
from obliviate.losses import lm_loss
from obliviate.models.builders import TinyModelConfig, build_tiny_model, param_count, parse_size
from obliviate.models.layers import ResumablePasses, attention_heads, count_passes, d_ff
from obliviate.models.load import load_model, save_model
from obliviate.models.tokenizer import special_token_id
from obliviate.train.pretrain import ModelConfig, PretrainConfig, cached_pretrain, tokenizer_for
from obliviate.papers import as_results, claims_json, recipe
from obliviate.papers.token_filtering.claims import claims_of
from obliviate.papers.token_filtering.report import render
from obliviate.runs.parts import PartStore
from obliviate.runs.results import write_results
from obliviate.tasks.world import WorldConfig, generate_world
from obliviate.train import StepSampler, TrainConfig, make_lm_batches, train
from obliviate.train.distributed import two_at_a_time
from obliviate.train.sgtm import SGTMConfig, ablate, dedicated_masks, retain_step, routed_loss
from obliviate.utils import seed_everything

TOKEN_STRATEGIES = ("mask", "remove")
FILTER_STRATEGIES = ("mask", "remove", "drop_document")
FLAG_STRATEGIES = (*TOKEN_STRATEGIES, "sgtm")
"""The strategies that read the token classifier's per-token flags (the label-noise runs' choices)."""
STRATEGIES = (*FILTER_STRATEGIES, "sgtm")
"""What a pretraining run can do with the classifier's flags: filter (the three above) or route them (``sgtm``,
Selective Gradient Masking: every token trains, a flagged one only the parameters dedicated to it, which are
ablated after training; :mod:`obliviate.train.sgtm`)."""

SCALES: dict[str, dict] = {
    "full": dict(sizes=list(FILTERED_MODELS.sizes), pareto_size="3x48", tokens_per_param=20.0,
                 labeller_layers=4,
                 labeller_d=128, labeller_steps=300, sae_steps=600, bilm_steps=400, adv_steps=400,
                 adv_eval_every=10, refusal_steps=120, pareto_thresholds=[0.3, 0.5, 0.7],
                 noise_ps=[0.0, 0.05, 0.1, 0.2]),
    "quick": dict(sizes=list(FILTERED_MODELS.quick_sizes), pareto_size="2x32", tokens_per_param=10.0,
                  labeller_layers=2,
                  labeller_d=64, labeller_steps=150, sae_steps=300, bilm_steps=200, adv_steps=150,
                  adv_eval_every=10, refusal_steps=60, pareto_thresholds=[0.3, 0.5, 0.7],
                  noise_ps=[0.0, 0.1, 0.3]),
}
"""Values of the ``None`` fields of :class:`TokenFilteringConfig` for the full run and ``--quick``."""


@dataclass
class TokenFilteringConfig:
    seed: int = 0
    quick: bool = False
    """Use the ``quick`` scale for the fields left at ``None`` (see :data:`SCALES`)."""
    command: str = ""
    parallel: bool = True
    """Train the models two at a time, one torch thread each (:func:`obliviate.runs.parts.cached_parts`): on 2
    cores this nearly halves the run. Not part of a run's identity: a run resumes with it on or off."""
    world: WorldConfig = field(default_factory=WorldConfig)
    vocab_size: int = FILTERED_MODELS.vocab_size
    """BPE vocabulary of the world tokenizer shared by every model (a small one keeps the
    unembedding from dominating the compute of the smallest models)."""
    eval_fraction: float = 0.1
    """Fraction of the world's documents held out for every loss reported (never trained on)."""

    # -- weak labels
    labeller_layers: int | None = None
    """Labeller model depth (full 4, quick 2)."""
    labeller_d: int | None = None
    """Labeller width (full 128, quick 64)."""
    labeller_steps: int | None = None
    """Labeller pretraining steps (full 300, quick 150)."""
    sae_latents: int = 512
    sae_k: int = 32
    sae_steps: int | None = None
    calibration_fraction: float = 0.1
    """Fraction of the training documents whose ground truth chooses the domain latents."""
    min_ratio: float = 2.0
    """Domain-ratio cut for a domain latent (:func:`obliviate.filtering.select_domain_latents`; at 4 a
    tiny labeller's SAE has only a handful of domain latents and the weak labels recall under 10%)."""
    min_latents: int = 2
    """A token is seeded when this many domain latents exceed their thresholds."""

    # -- classifiers
    bilm_layers: int = TokenClassifierConfig.layers
    """biLM depth: one layer keeps the classifier >= 20x cheaper per token than pretraining the
    largest full-run model (``make bench``)."""
    bilm_d: int = TokenClassifierConfig.d_model
    bilm_steps: int | None = None
    context_window: int = TokenClassifierConfig.context_window
    """Token features = [biLM state, its mean over +-window tokens]
    (:class:`~obliviate.filtering.ContextPooled`; 0: the biLM state alone, as in the paper). With window 8 the
    ground-truth-fit classifier's AUROC on the world goes from about 0.65 to 0.93."""
    threshold: float = 0.5
    """Token-classifier threshold of the main runs."""
    doc_label_fraction: float = TokenClassifierConfig.doc_label_fraction
    """A document's weak (and true) label: more than this fraction of its tokens in-domain."""
    doc_threshold: float = TokenClassifierConfig.doc_threshold
    """Document-classifier threshold of the main runs."""
    classifier_noise_ps: list[float] = field(default_factory=lambda: TokenClassifierConfig().noise_ps)
    """Flip noise on the weak labels the token head is fit on (AUROC vs p)."""

    # -- filtered pretraining
    sizes: list[str] | None = None
    """Model sizes ``"<layers>x<width>"`` (full 1x16 2x32 3x48 4x64 4x96, quick 1x16 2x24 2x32 3x40)."""
    strategies: list[str] = field(default_factory=lambda: ["mask", "remove", "drop_document"])
    """Filtering strategies trained at every size next to the unfiltered ``none`` (``sgtm`` too: gradient
    routing on the same flags, :data:`STRATEGIES`)."""
    convention: Literal["input", "target"] = "input"
    """Loss-masking position convention (see :mod:`obliviate.filtering.strategies`)."""
    tokens_per_param: float | None = None
    """Training tokens per parameter (full 20, Chinchilla; quick 10)."""
    row_len: int = FILTERED_MODELS.row_len
    batch_size: int = FILTERED_MODELS.batch_size
    lr: float = 3e-3

    # -- Pareto and label noise (at pareto_size)
    pareto_size: str | None = None
    """Size of the Pareto and label-noise runs (full 3x48, quick 2x32; the second-largest size when
    ``sizes`` is set without it)."""
    pareto_thresholds: list[float] | None = None
    """Token- and document-classifier thresholds of the Pareto runs (both: 0.3 0.5 0.7)."""
    pareto_token_strategy: Literal["mask", "remove"] = "remove"
    noise_ps: list[float] | None = None
    """Flip probability p on the pretraining flags (full 0 .05 .1 .2, quick 0 .1 .3)."""
    noise_strategies: list[str] | None = None
    """Strategies trained at every ``noise_ps`` on the same noisy flags (None: ``pareto_token_strategy``
    alone; ``[remove, sgtm]`` puts SGTM beside token removal, issue #59's comparison on weak labels)."""
    sgtm_head_share: float = 0.25
    """SGTM: share of each layer's attention heads dedicated to the flagged tokens, rounded down (the world's
    SGTM dedicates 1 of 4; a model with fewer than 4 heads dedicates MLP units only)."""
    sgtm_mlp_share: float = 0.18
    """SGTM: share of each layer's MLP units dedicated to them, rounded, at least one (the world's: 64 of
    352)."""

    # -- adversarial fine-tuning and refusal (at the largest size)
    adv_steps: int | None = None
    adv_lr: float = 1e-3
    adv_batch_size: int = 8
    adv_eval_every: int | None = None
    rmu_coef: float = 20.0
    """RMU steering coefficient (the tiny preset's value; on these models it raises the forget loss)."""
    rmu_alpha: float = 100.0
    """RMU retain weight (the tiny preset has 10, which on these smaller models wrecks the retain domain too:
    at 3x40, alpha 10 took the retain loss from 1.0 to 2.3, alpha 100 to 1.1 while the forget loss went 1.0 ->
    1.7)."""
    rmu: dict = field(default_factory=dict)
    """Other settings of RMU's run, as ``obliviate unlearn``'s ``unlearn.*`` (``rmu.train.steps=80``,
    ``rmu.train.lr=5e-4``)."""
    refusal_strategies: list[str] = field(default_factory=lambda: ["none", "mask", "remove"])
    refusal_steps: int | None = None
    refusal_lr: float = 1e-3
    refusal_batch_size: int = 16

    def __post_init__(self):
        for key in ("eval_fraction", "calibration_fraction", "threshold", "doc_threshold",
                    "doc_label_fraction"):
            v = getattr(self, key)
            if not 0.0 < v < 1.0:
                raise ConfigError(f"config key '{key}': must be in (0, 1), got {v}")
        if self.context_window < 0:
            raise ConfigError(f"config key 'context_window': must be >= 0, got {self.context_window}")
        for key in ("vocab_size", "row_len", "batch_size", "adv_batch_size", "refusal_batch_size",
                    "bilm_layers",
                    "bilm_d", "min_latents"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be >= 1, got {getattr(self, key)}")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ConfigError(f"config key 'strategies': unknown strategy {s!r} "
                                  f"(valid: {', '.join(STRATEGIES)})")
        for s in self.noise_strategies or []:
            if s not in FLAG_STRATEGIES:
                raise ConfigError(f"config key 'noise_strategies': {s!r} is not a token-level strategy "
                                  f"(valid: {', '.join(FLAG_STRATEGIES)})")
        for key in ("sgtm_head_share", "sgtm_mlp_share"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"config key '{key}': must be in [0, 1), got {getattr(self, key)}")
        for s in self.refusal_strategies:
            if s != "none" and s not in self.strategies:
                raise ConfigError(f"config key 'refusal_strategies': {s!r} "
                                  "is not 'none' or one of strategies")
        if self.sizes is not None:
            for s in self.sizes:
                parse_size(s)
        for p in list(self.noise_ps or []) + list(self.classifier_noise_ps):
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"config key 'noise_ps': probabilities must be in [0, 1], got {p}")
        rmu_run_config(self)  # a bad rmu.* key fails before any pretraining


def rmu_run_config(cfg: TokenFilteringConfig):
    """RMU's :class:`~obliviate.unlearning.engine.UnlearnConfig` and settings: the tiny preset, then
    ``rmu_coef``, ``rmu_alpha`` and ``rmu.*`` (a key of ``rmu`` is named as ``rmu.<key>``)."""
    run = cfg.rmu  # not a mapping, or params not one: method_run_config names it
    if isinstance(run, dict) and isinstance(params := run.get("params", {}), dict):
        run = {**run, "params": {"coef": cfg.rmu_coef, "alpha": cfg.rmu_alpha, **params}}
    return method_run_config("rmu", run, "tiny", cfg.seed, prefix="rmu")


def resolve(cfg: TokenFilteringConfig) -> TokenFilteringConfig:
    """A copy of ``cfg`` with its ``None`` fields taken from the quick or full scale, checked."""
    out = copy.deepcopy(cfg)
    scale = SCALES["quick" if cfg.quick else "full"]
    for key, value in scale.items():
        if key == "pareto_size" and cfg.sizes is not None:
            continue  # sizes of one's own: the scale's Pareto size may not be among them
        if getattr(out, key) is None:
            setattr(out, key, copy.deepcopy(value))
    if len(out.sizes) < 2:
        raise ConfigError(f"config key 'sizes': the scaling fit needs at least two sizes, got {out.sizes}")
    if len(set(out.sizes)) != len(out.sizes):
        raise ConfigError(f"config key 'sizes': duplicate sizes in {out.sizes}")
    if out.pareto_size is None:
        out.pareto_size = out.sizes[-2]
    if out.noise_strategies is None:
        out.noise_strategies = [out.pareto_token_strategy]
    if out.pareto_size not in out.sizes:
        raise ConfigError(f"config key 'pareto_size': {out.pareto_size!r} is not one of sizes {out.sizes}")
    for t in out.pareto_thresholds:
        if not 0.0 < t < 1.0:
            raise ConfigError(f"config key 'pareto_thresholds': thresholds must be in (0, 1), got {t}")
    return out


# --------------------------------------------------------------------------- pure analysis (tested by hand)


def dominated(point: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    """Is ``(forget_loss, retain_loss)`` weakly Pareto-dominated by one of ``others``?

    Higher forget loss is better (the capability is gone), lower retain loss is better: a point
    is dominated by one with forget loss >= and retain loss <= its own.
    """
    f, r = point
    return any(of >= f and orr <= r for of, orr in others)


def slowdowns(runs: dict, sizes: list[str], domain: str) -> tuple[tuple[float, float] | None, dict]:
    """Fit ``log L = a + b log C`` on the unfiltered runs' ``domain`` loss; slowdown of every run.

    ``runs[size][strategy]`` holds ``flops`` and ``loss[domain]``. Returns the fit (None if it is
    not decreasing, b >= 0, where no slowdown is defined) and ``{size: {strategy: slowdown}}``.
    """

    C = [runs[s]["none"]["flops"] for s in sizes]
    L = [runs[s]["none"]["loss"][domain] for s in sizes]
    fit = fit_power_law(C, L)
    if fit[1] >= 0:
        return None, {s: {k: None for k in runs[s]} for s in sizes}
    return fit, {s: {k: compute_slowdown(fit, v["loss"][domain], v["flops"]) for k, v in runs[s].items()}
                 for s in sizes}


def baseline_rises(runs: dict, sizes: list[str], domain: str) -> list[tuple[str, str]]:
    """``(smaller, larger)`` pairs of consecutive sizes where the unfiltered model's held-out ``domain``
    loss goes *up* with size and compute: no power law holds there (typically the larger model saw
    the corpus for many more epochs and memorised it), so slowdowns read off the fit mean nothing."""
    L = [runs[s]["none"]["loss"][domain] for s in sizes]
    return [(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1) if L[i + 1] > L[i]]


def _data(cfg: TokenFilteringConfig):
    """World, tokenizer, training and held-out document datasets (a seeded document split)."""
    from types import SimpleNamespace

    world = generate_world(cfg.world)
    tok = tokenizer_for(world, cfg.vocab_size)
    docs = world.documents()
    perm = np.random.default_rng(cfg.seed).permutation(len(docs))
    n_eval = max(1, int(round(cfg.eval_fraction * len(docs))))
    if n_eval >= len(docs):
        raise DataError(f"eval_fraction={cfg.eval_fraction} leaves "
                        f"no training documents ({len(docs)} in all)")
    eval_docs = [docs[i] for i in sorted(perm[:n_eval])]
    train_docs = [docs[i] for i in sorted(perm[n_eval:])]
    train = encode_documents(tok, train_docs, max_len=cfg.row_len)
    held = encode_documents(tok, eval_docs, max_len=cfg.row_len)
    special = [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id]
    return SimpleNamespace(world=world, tok=tok, train=train, eval=held, special=special,
                           hidden_id=special_token_id(tok, "hidden"), pad=tok.pad_token_id)


def _labeller_config(cfg: TokenFilteringConfig):
    return PretrainConfig(
        seed=cfg.seed, world=cfg.world,
        model=ModelConfig(n_layer=cfg.labeller_layers, d_model=cfg.labeller_d, vocab_size=cfg.vocab_size),
        train=TrainConfig(steps=cfg.labeller_steps, lr=3e-3, warmup_steps=min(20, cfg.labeller_steps // 10),
                          schedule="cosine", min_lr_ratio=0.1, log_every=10, desc="labeller"))


def _labels(cfg, D, labeller_dir: Path, out: Path, progress: bool) -> dict:
    """SAE weak labels (:func:`~obliviate.filtering.sae_weak_labels`), then the biLM token and document
    classifiers (:func:`~obliviate.filtering.fit_token_classifiers`); arrays to ``labels.npz``, metrics
    returned."""

    torch.manual_seed(cfg.seed)
    labeller = load_model(str(labeller_dir / "model")).eval()
    layer = cfg.labeller_layers // 2
    train, held = D.train, D.eval
    truth_tr, truth_ev = ground_truth(train), ground_truth(held)

    # weak labels: SAE on the labeller's residual stream, latents chosen on a calibration slice
    wcfg = WeakLabelConfig(latents=cfg.sae_latents, k=cfg.sae_k, steps=cfg.sae_steps,
                           calibration_fraction=cfg.calibration_fraction, min_ratio=cfg.min_ratio,
                           min_latents=cfg.min_latents, seed=cfg.seed)
    weak, weak_info = sae_weak_labels(labeller, train, truth_tr, layer, wcfg, special_ids=D.special,
                                      pad_id=D.pad,
                                      progress=progress)
    del labeller

    # the biLM token classifier and the document-classifier baseline, fit on the weak labels
    ccfg = TokenClassifierConfig(layers=cfg.bilm_layers, d_model=cfg.bilm_d, steps=cfg.bilm_steps,
                                 context_window=cfg.context_window, thresholds=_sweep_thresholds(cfg),
                                 noise_ps=list(cfg.classifier_noise_ps),
                                 doc_label_fraction=cfg.doc_label_fraction,
                                 doc_threshold=cfg.doc_threshold, seed=cfg.seed)
    clf = fit_token_classifiers(train, held, weak, truth_tr, truth_ev, len(D.tok), ccfg,
                                special_ids=D.special,
                                pad_id=D.pad, bos_id=D.tok.bos_token_id, eos_id=D.tok.eos_token_id,
                                save_dir=out / "models", progress=progress)
    probs_tr, doc_probs_tr = clf.probs, clf.doc_probs

    lengths = np.array([len(s) for s in train.input_ids])
    np.savez_compressed(PartStore(out / "parts").path("labels", ".npz"), lengths=lengths,
                        weak=flatten(weak).astype(bool), probs=flatten(probs_tr).astype(np.float32),
                        doc_probs=np.asarray(doc_probs_tr, np.float32))
    return {
        **weak_info,
        "weak_flagged": float(flatten(weak).mean()),
        "true_fraction": float(flatten(truth_tr).mean()),
        **clf.metrics,
        "doc_fraction_flagged": float((np.asarray(doc_probs_tr) >= cfg.doc_threshold).mean()),
    }


def _sweep_thresholds(cfg: TokenFilteringConfig) -> list[float]:
    """0.1, 0.2, ..., 0.9, the main runs' threshold and the Pareto thresholds."""
    return sorted(set([round(float(t), 2) for t in np.linspace(0.1, 0.9, 9)] + [cfg.threshold]
                      + list(cfg.pareto_thresholds)))


def _load_labels(out: Path) -> dict:
    z = np.load(PartStore(out / "parts").path("labels", ".npz"))
    lengths = [int(x) for x in z["lengths"]]
    return {"weak": split_flat(z["weak"], lengths), "probs": split_flat(z["probs"], lengths),
            "doc_probs": z["doc_probs"]}


def _eval_losses(model, held) -> dict:
    with torch.no_grad():
        res = token_loss_by_label(model, held, "domain")
    return {k: v["loss"] for k, v in res.items() if k != "None"}


def _pretrain_run(cfg, D, labels, name: str, size: str, strategy: str, threshold: float, noise: float,
                  out: Path, progress: bool) -> dict:
    """Train one model of ``size`` with ``strategy`` on the training documents; held-out losses."""
    import shutil

    model, _ = build_tiny_model(D.tok, TinyModelConfig.of_size(size, max_len=cfg.row_len), seed=cfg.seed)
    flags = None
    doc_flags = None
    if strategy in FLAG_STRATEGIES:
        flags = flags_from_probs(labels["probs"], threshold)
        if noise > 0:
            flags = add_label_noise(flags, noise, seed=cfg.seed + 11)
    elif strategy == "drop_document":
        doc_flags = np.asarray(labels["doc_probs"]) >= threshold
        if noise > 0:
            doc_flags = add_label_noise(doc_flags, noise, seed=cfg.seed + 11)
    N = param_count(model, non_embedding=False)
    target = tokens_for(N, cfg.tokens_per_param)
    if strategy == "sgtm":
        return _sgtm_run(cfg, D, model, flags, N, target, name, out, progress) | {
            "size": size, "strategy": strategy, "threshold": threshold, "noise": noise, "params": N}
    if doc_flags is not None and np.asarray(doc_flags).all():  # nothing left to train on: the untrained model
        save_model(model, str(out / "models" / name))
        return {"size": size, "strategy": strategy, "threshold": threshold, "noise": noise, "params": N,
                "tokens": target, "steps": 0, "flops": training_flops(N, target),
                "loss": _eval_losses(model, D.eval),
                "flagged_fraction": 0.0, "kept_documents": 0.0, "trained_token_fraction": 0.0,
                "note": "every document dropped: the model is its "
                        "initialisation (compute counted as planned)"}
    fds = apply_strategy(D.train, flags, strategy, cfg.convention, hidden_id=D.hidden_id, doc_flags=doc_flags)
    packed = pack_filtered(fds, cfg.row_len)
    batch_fn = make_batch_fn(packed, cfg.batch_size, cfg.seed, D.pad)
    tc, tokens = _pretrain_budget(cfg, packed, target, name, progress)
    run_dir = out / "runs" / name
    train(model, lambda m, b, s: {"lm": lm_loss(m, b)}, batch_fn, tc, run_dir)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    save_model(model, str(out / "models" / name))
    flagged = float(np.mean(np.concatenate(flags))) if flags is not None else 0.0
    return {"size": size, "strategy": strategy, "threshold": threshold, "noise": noise, "params": N,
            "tokens": tokens, "steps": tc.steps, "flops": training_flops(N, tokens),
            "loss": _eval_losses(model, D.eval),
            "flagged_fraction": flagged, "kept_documents": float(len(fds) / len(D.train)),
            "trained_token_fraction": fds.n_trained_tokens()
            / max(1, sum(len(s) - 1 for s in D.train.input_ids))}


def _pretrain_budget(cfg, packed: TokenDataset, target: float, name: str, progress: bool) -> tuple[TrainConfig, int]:
    """The training of one pretraining run on the packed rows ``packed``: as many steps of ``cfg.batch_size`` rows
    as reach ``target`` tokens at their mean length, and the tokens those steps draw (every run's schedule)."""
    steps = max(1, math.ceil(target / (cfg.batch_size * (packed.n_tokens() / len(packed)))))
    tokens = sum(StepSampler(len(packed), cfg.batch_size, cfg.seed).step_tokens(
        [len(s) for s in packed.input_ids], steps))
    tc = TrainConfig(steps=steps, lr=cfg.lr, warmup_steps=min(20, steps // 10), schedule="cosine",
                     min_lr_ratio=0.1, grad_clip=1.0, log_every=max(1, steps // 20),
                     checkpoint_every=max(50, steps // 10), progress=progress, desc=name)
    return tc, tokens


def sgtm_config(model, cfg: TokenFilteringConfig) -> SGTMConfig:
    """The parameters SGTM dedicates in ``model``: ``sgtm_head_share`` of its heads (rounded down) and
    ``sgtm_mlp_share`` of its MLP units (rounded, at least one) in every layer."""
    return SGTMConfig(heads=int(cfg.sgtm_head_share * attention_heads(model)[0]),
                      mlp_units=max(1, round(cfg.sgtm_mlp_share * d_ff(model, 0))))


def routed_marks(flags, convention: str) -> list[np.ndarray]:
    """SGTM's routed targets (1: the loss of predicting that token reaches only the dedicated parameters) for
    per-sequence ``flags``: exactly the loss terms that loss masking drops under ``convention``
    (:func:`~obliviate.filtering.strategies.loss_weights`)."""
    return [(loss_weights(f, convention) == 0).astype(np.int64) for f in flags]


def _sgtm_run(cfg, D, model, flags, n_params: int, target: float, name: str, out: Path, progress: bool) -> dict:
    """Selective Gradient Masking on the training documents with ``flags`` as its labels (the classifier's, as
    filtering reads them): the same token budget and batches as a filtered run, every token a target, a loss
    term that masking would drop (:func:`routed_marks`) updating only the dedicated parameters
    (:func:`~obliviate.train.sgtm.routed_loss`), which are zeroed after training; held-out losses of the
    ablated model. ``flops`` counts the data budget, 6ND as for the filtered runs; the passes show the real
    compute (two forwards and backwards a step)."""
    import shutil

    scfg = sgtm_config(model, cfg)
    masks = dedicated_masks(model, scfg)
    data = pack_sequences(TokenDataset(D.train.input_ids, {"routed": routed_marks(flags, cfg.convention)},
                                       dict(D.train.vocab)), cfg.row_len)
    batch_fn = make_lm_batches(data, cfg.batch_size, cfg.seed, D.pad, extra={"routed": data.labels["routed"]})
    tc, tokens = _pretrain_budget(cfg, data, target, name, progress)

    def loss_fn(m, batch, step):
        return {"lm": routed_loss(m, [batch], masks, retain_step(cfg.seed, step, scfg.retain_share))}

    run_dir = out / "runs" / name
    with count_passes(model) as passes:  # a resumed run: the checkpoint's carried over
        carried = ResumablePasses(passes)
        summary = train(model, loss_fn, batch_fn, tc, run_dir, state_hooks=carried.hooks)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    model.eval()
    zeroed = ablate(model, masks)
    save_model(model, str(out / "models" / name))
    return {"tokens": tokens, "steps": tc.steps, "flops": training_flops(n_params, tokens),
            "loss": _eval_losses(model, D.eval),
            "flagged_fraction": float(np.mean(np.concatenate(flags))), "kept_documents": 1.0,
            "trained_token_fraction": 1.0,
            "sgtm": {"heads": scfg.heads, "mlp_units": scfg.mlp_units, "ablated_share": zeroed / n_params,
                     "passes": dict(passes), "passes_whole_run": carried.whole_run(summary.get("resumed_from", 0))}}


def _finetune_curve(cfg, D, model, name: str, out: Path, progress: bool) -> dict:
    """Adversarial fine-tuning on the training documents' forget-domain text
    (:mod:`obliviate.attacks.adversarial`)."""
    bos = D.tok.bos_token_id
    seqs = [np.concatenate([[bos], r]) for r in domain_runs(D.train, "medicine")]
    if not seqs:
        raise DataError("the training documents hold no forget-domain text to fine-tune on")
    return loss_recovery_curve(model, seqs, lambda m: _eval_losses(m, D.eval)["medicine"],
                               steps=cfg.adv_steps,
                               lr=cfg.adv_lr, batch_size=cfg.adv_batch_size, eval_every=cfg.adv_eval_every,
                               pad_id=D.pad, seed=cfg.seed + 3, progress=progress, desc=name)


def _rmu(cfg, D, model, progress: bool):
    """RMU on the unfiltered model: forget set = forget-domain text, retain set = the other domains' text."""

    forget = [(D.tok.decode(r.tolist()), "") for r in domain_runs(D.train, "medicine")]
    retain = [(D.tok.decode(r.tolist()), "") for r in domain_runs(D.train, "medicine", inside=False)]
    ucfg, info = rmu_run_config(cfg)
    model, _ = unlearn(model, D.tok, forget, retain, ucfg, progress=progress)
    return model, info


def _refusal(cfg, D, model, name: str, progress: bool) -> dict:
    """Refusal SFT, then refusal rates on questions the SFT never saw (:mod:`obliviate.filtering.refusal`)."""
    return refusal_training(model, D.tok, D.world, steps=cfg.refusal_steps, lr=cfg.refusal_lr,
                            batch_size=cfg.refusal_batch_size, max_len=cfg.row_len, seed=cfg.seed,
                            progress=progress, desc=name)


# --------------------------------------------------------------------------- the recipe


def _run_name(size: str, strategy: str, threshold: float, noise: float = 0.0) -> str:
    if strategy == "none":
        return f"pretrain/{size}/none"
    return f"pretrain/{size}/{strategy}@{threshold:g}" + (f"+noise{noise:g}" if noise > 0 else "")


@recipe("token-filtering", TokenFilteringConfig,
        "token-level pretraining data filtering: scaling, "
        "Pareto vs documents, adversarial fine-tuning, refusal",
        render=render)
def run(cfg: TokenFilteringConfig, out, progress: bool = True) -> dict:
    t0 = time.time()
    out = Path(out)
    rc = resolve(cfg)
    seed_everything(rc.seed)

    parts = PartStore(out / "parts",
                      {k: v for k, v in to_dict(rc).items() if k not in ("command", "parallel")})
    D = _data(rc)

    def labels_job():  # the labeller comes from the pretraining cache (trained there once)
        return _labels(rc, D, cached_pretrain(_labeller_config(rc), progress=progress), out, progress)

    label_m = parts.get("labels", labels_job)
    labels = _load_labels(out)

    # ---- pretraining runs
    jobs = []
    for size in rc.sizes:
        jobs.append((size, "none", rc.threshold, 0.0))
        for s in rc.strategies:
            jobs.append((size, s, rc.doc_threshold if s == "drop_document" else rc.threshold, 0.0))
    for t in rc.pareto_thresholds:
        jobs.append((rc.pareto_size, rc.pareto_token_strategy, t, 0.0))
        jobs.append((rc.pareto_size, "drop_document", t, 0.0))
    for s in rc.noise_strategies:
        for p in rc.noise_ps:
            jobs.append((rc.pareto_size, s, rc.threshold, p))
    parallel = rc.parallel and two_at_a_time()
    shown = {"progress": progress}

    def quiet() -> None:  # the second process draws no progress bars
        shown["progress"] = False

    todo = {}
    for size, strategy, thr, p in jobs:
        name = _run_name(size, strategy, thr, p)
        todo.setdefault(name, lambda name=name, size=size, strategy=strategy, thr=thr, p=p: _pretrain_run(
            rc, D, labels, name, size, strategy, thr, p, out, shown["progress"]))
    runs: dict[str, dict] = parts.get_many(todo, parallel=parallel, in_child=quiet)

    main = {size: {"none": runs[_run_name(size, "none", 0)]} for size in rc.sizes}
    for size in rc.sizes:
        for s in rc.strategies:
            main[size][s] = runs[_run_name(size, s,
                                           rc.doc_threshold if s == "drop_document" else rc.threshold)]
    fit_f, slow_f = slowdowns(main, rc.sizes, "medicine")
    fit_r, slow_r = slowdowns(main, rc.sizes, "biology")
    corpus_tokens = D.train.n_tokens()

    # ---- adversarial fine-tuning and RMU at the largest size
    big = rc.sizes[-1]
    baseline = main[big]["none"]["loss"]["medicine"]
    pre_tokens = main[big]["none"]["tokens"]
    todo = {}
    for s in rc.strategies:
        def job(s=s):
            model = load_model(str(out / "models" / _run_name(big, s, rc.doc_threshold if s == "drop_document"
                                                                 else rc.threshold)))
            return _finetune_curve(rc, D, model, f"adversarial/{s}", out, shown["progress"])
        todo[f"adversarial/{s}"] = job

    def rmu_job():
        model, info = _rmu(rc, D, load_model(str(out / "models" / _run_name(big, "none", 0))),
                           shown["progress"])
        after = _eval_losses(model, D.eval)
        res = _finetune_curve(rc, D, model, "adversarial/rmu", out, shown["progress"])
        return {**res, "rmu": info, "loss_after_rmu": after}

    todo["adversarial/rmu"] = rmu_job
    adv = {k.split("/", 1)[1]: v for k, v in parts.get_many(todo, parallel=parallel, in_child=quiet).items()}

    for k, v in adv.items():
        v["tokens_to_recover"] = tokens_to_recover([tuple(p) for p in v["curve"]], baseline)
        # the one recovery cost (obliviate.attacks.relearn.recovery_cost), in loss: tokens until the fine-tune
        # closes half the gap between its starting forget loss and the baseline's (null when nothing was lost,
        # and
        # here also when the budget ran out first: the claims read null as "not recovered within the budget")
        start = v["curve"][0][1] if v["curve"] else None
        cost = recovery_cost([v["curve"]], start, baseline, higher_is_better=False)
        v["recovery_cost_tokens"] = (None if cost["recovery_cost_bound"] == "above_budget"
                                     else cost["recovery_cost_tokens"])

    # ---- refusal training at the largest size
    refusal = {}
    for s in rc.refusal_strategies:
        def rjob(s=s):
            thr = rc.doc_threshold if s == "drop_document" else rc.threshold
            model = load_model(str(out / "models" / _run_name(big, s, thr)))
            return _refusal(rc, D, model, f"refusal/{s}", progress)
        refusal[s] = parts.get(f"refusal/{s}", rjob)

    # ---- metrics
    metrics: dict = {}
    for size in rc.sizes:
        metrics[size] = {}
        for s, r in main[size].items():
            metrics[size][s] = {"params": r["params"], "tokens": r["tokens"], "flops": r["flops"],
                                "forget_loss": r["loss"].get("medicine"),
                                "retain_loss": r["loss"].get("biology"),
                                "general_loss": r["loss"].get("general"),
                                "compute_slowdown": slow_f[size][s],
                                "retain_compute_slowdown": slow_r[size][s],
                                "flagged_fraction": r["flagged_fraction"],
                                "kept_documents": r["kept_documents"],
                                "epochs": r["tokens"] / corpus_tokens}
    for k, v in adv.items():
        metrics[k] = {"adversarial_tokens": v["tokens_to_recover"],
                      "recovered": v["tokens_to_recover"] is not None,
                      "adversarial_budget_tokens": v["budget_tokens"],
                      "adversarial_tokens_fraction_of_pretraining":
                          None if v["tokens_to_recover"] is None else v["tokens_to_recover"] / pre_tokens,
                      "start_forget_loss": v["curve"][0][1] if v["curve"] else None,
                      "recovery_cost_tokens": v["recovery_cost_tokens"],
                      "recovery_cost_flops": None if v["recovery_cost_tokens"] is None
                      else 6.0 * main[big]["none"]["params"] * v["recovery_cost_tokens"],
                      "curve": v["curve"]}
    metrics["rmu"]["loss_after_rmu"] = adv["rmu"]["loss_after_rmu"]
    metrics["adversarial"] = {"size": big, "baseline_forget_loss": baseline, "pretraining_tokens": pre_tokens}
    metrics["fit"] = {"forget": fit_f, "retain": fit_r, "corpus_tokens": corpus_tokens,
                      "baseline_rises": {"forget": baseline_rises(main, rc.sizes, "medicine"),
                                         "retain": baseline_rises(main, rc.sizes, "biology")}}
    metrics["labels"] = label_m
    pareto = {"size": rc.pareto_size, "none": runs[_run_name(rc.pareto_size, "none", 0)]["loss"],
              "token": [], "document": []}
    for t in rc.pareto_thresholds:
        for key, strat in (("token", rc.pareto_token_strategy), ("document", "drop_document")):
            r = runs[_run_name(rc.pareto_size, strat, t)]
            pareto[key].append({"threshold": t, "forget_loss": r["loss"]["medicine"],
                                "retain_loss": r["loss"]["biology"],
                                "flagged_fraction": r["flagged_fraction"],
                                "kept_documents": r["kept_documents"]})
    tok_pts = [(p["forget_loss"], p["retain_loss"]) for p in pareto["token"]]
    pareto["documents_dominated"] = sum(dominated((p["forget_loss"], p["retain_loss"]), tok_pts)
                                        for p in pareto["document"])
    metrics["pareto"] = pareto
    by_strategy = {}
    for s in rc.noise_strategies:
        by_strategy[s] = []
        for p in rc.noise_ps:
            r = runs[_run_name(rc.pareto_size, s, rc.threshold, p)]
            by_strategy[s].append({"p": p, "forget_loss": r["loss"]["medicine"], "retain_loss": r["loss"]["biology"],
                                   "compute_slowdown": _slow_one(fit_f, r["loss"]["medicine"], r["flops"]),
                                   "retain_compute_slowdown": _slow_one(fit_r, r["loss"]["biology"], r["flops"])})
    first = rc.noise_strategies[0]
    metrics["label_noise"] = {"size": rc.pareto_size, "strategy": first, "rows": by_strategy[first]}
    if len(by_strategy) > 1:
        metrics["label_noise"]["by_strategy"] = by_strategy
    metrics["refusal"] = refusal

    seconds = time.time() - t0
    timings = {"parts": parts.timings, "this_invocation_seconds": seconds}
    results = as_results(rc, metrics=metrics, timings=timings)  # what results.json will hold
    claims = claims_of(results)
    render(results, out)
    write_results(out, seed=rc.seed, config=rc, metrics=metrics, claims=claims_json(claims), timings=timings)
    return metrics


def _slow_one(fit, L, C):
    return None if fit is None else compute_slowdown(fit, L, C)
