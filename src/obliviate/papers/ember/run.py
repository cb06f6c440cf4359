"""The EMBER recipe's experiments (:mod:`obliviate.papers.ember`); claims and report are other modules."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from obliviate.attacks.relearn import RelearnConfig, relearn_attack
from obliviate.tasks.ember import list_ember_concepts, load_ember
from obliviate.config import config_hash, deep_merge, to_dict
from obliviate.data import encode_documents, pack_sequences
from obliviate.methods.ember import (
    LexiconJudge,
    build_vocab,
    efficacy,
    ember_erase,
    judge_from_sentences,
    locate_concept_features,
    restore_embeddings,
    select_delta,
    snapshot_embeddings,
    specificity,
)
from obliviate.methods.ember.combine import ember_then
from obliviate.methods.ember.judge import judge_features
from obliviate.errors import ConfigError, DataError
from obliviate.unlearning.engine import method_run_config, method_runner as executor_runner
from obliviate.eval import token_loss_by_label
from obliviate.eval.suite import evaluate_set, evaluate_task, text_loss
from obliviate.losses import lm_loss
from obliviate.methods import get_method
from obliviate.models.builders import TinyModelConfig, build_tiny_model
from obliviate.models.load import load_model, load_tokenizer
from obliviate.train.pretrain import PretrainConfig, cached_pretrain, world_for
from obliviate.papers import as_results, claims_json, recipe
from obliviate.papers.ember.claims import claims_of
from obliviate.papers.ember.report import render
from obliviate.runs.parts import cached_part
from obliviate.runs.results import write_results
from obliviate.tasks.base import Task
from obliviate.tasks.world import facts_task
from obliviate.train import TrainConfig, make_lm_batches, train
from obliviate.utils import recorded_path, seed_everything

PARTS = ("world", "data")
METHODS = ["rmu", "snmf", "crisp"]
DELTAS = [0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 200.0]
PIECES_VERSION = 1
"""Part of every stored piece's key: bump it when a metric's definition changes, so old pieces are redone."""

METHOD_DEFAULTS: dict[str, dict] = {
    # Settings for the world's 4-layer d=128 model, on top of each method's tiny preset; "runs.<m>.*"
    # overrides them. Chosen by a small sweep on world seed 0 (docs/recipes.md, "ember"): RMU needs a larger
    # steering coefficient and a smaller retain weight than compare's defaults to bring the concept MCQ down
    # (with utility >= 0.9 of the base); SNMF: the two middle MLP layers and delta 5, the strongest edit that
    # kept utility (delta 8-10 lowers every domain alike); CRISP: the paper's beta, gamma, top-k and LoRA rank
    # 4 with a tiny-model learning rate, its SAEs trained on the concept and
    # neutral sentences. SNMF and CRISP leave the concept MCQ unchanged at this scale (the report says so).
    "rmu": {"train": {"steps": 100}, "params": {"coef": 50.0, "alpha": 5.0}},
    "snmf": {"params": {"layers": [1, 2], "delta": 5.0, "K": 32, "sparsity": 0.05, "n_iter": 200,
                        "max_features": 3}},
    "crisp": {"lora": True, "lora_r": 4, "train": {"lr": 1e-2, "steps": 50},
              "params": {"top_k": 10, "sae_steps": 200}},
}


@dataclass
class WorldConceptConfig:
    """The world-concept part."""

    methods: list[str] = field(default_factory=lambda: list(METHODS))
    """MLP methods, each run alone and with EMBER."""
    runs: dict = field(default_factory=dict)
    """Per-method settings (as ``obliviate compare``'s): ``runs.rmu.train.steps=30``,
    ``runs.snmf.params.delta=2``."""
    method_steps: int | None = None
    """Training steps of every training method unless ``runs.<m>.train.steps`` is set (None: their
    defaults)."""
    K: int = 100
    """Embedding features (the paper's value for a 2B model); capped at |V'|."""
    sparsity: float = 0.02
    """Winner-takes-all share of V' kept per feature (paper: 0.01 of a much larger V'; module docstring)."""
    min_ratio: float = 2.0
    judge: Literal["lexicon", "sentences"] = "lexicon"
    """``lexicon``: LexiconJudge over the world's exclusive terms; ``sentences``: judge_from_sentences."""
    judge_top: int = 20
    """Top tokens per candidate feature shown to the judge (paper: 20)."""
    min_confidence: float = 0.85
    factor_max_iter: int = 5000
    """Cap on factorisation iterations (paper: 20,000; early stop after ``factor_patience`` without gain)."""
    factor_patience: int = 500
    deltas: list[float] = field(default_factory=lambda: list(DELTAS))
    """The delta grid (paper's)."""
    relearn_epochs: int = 2
    relearn_batch_size: int = 4
    relearn_lr: float = 1e-3
    relearn_weight_decay: float = 0.01

    def __post_init__(self):
        for name in self.methods:
            if name.endswith("+ember") or name == "ember":
                raise ConfigError(f"config key 'world_concept.methods': give plain MLP methods, not {name!r} "
                                  "(each is run alone and with EMBER)")
            get_method(name)
        for name in self.runs:
            if name not in self.methods:
                raise ConfigError(f"config key 'world_concept.runs.{name}': "
                                  f"'{name}' is not among the methods")
        if not self.deltas:
            raise ConfigError("config key 'world_concept.deltas': needs at least one delta")
        _check_positive(self, "world_concept", ("K", "judge_top", "factor_max_iter", "factor_patience",
                                                "relearn_epochs", "relearn_batch_size"))
        if self.method_steps is not None and self.method_steps < 1:
            raise ConfigError("config key 'world_concept.method_steps': "
                              f"must be >= 1, got {self.method_steps}")
        if not 0 < self.sparsity <= 1:
            raise ConfigError(f"config key 'world_concept.sparsity': must be in (0, 1], got {self.sparsity}")


@dataclass
class EmberDataConfig:
    """The real-EMBER-data part."""

    data: str | None = None
    """Data directory holding ``ember/`` (None: ``$OBLIVIATE_DATA`` or ``../shared/data``)."""
    concepts: list[str] = field(default_factory=list)
    """Concepts by name; empty: the first ``n_concepts`` in the file's order."""
    n_concepts: int = 3
    heldout: float = 0.2
    """Share of the concept and neutral sentences held out for perplexity."""
    vocab_size: int = 2048
    """BPE vocabulary trained per concept (smaller ones split most words into pieces the judge cannot
    read)."""
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    max_len: int = 128
    train_steps: int = 200
    """Steps of 16 packed rows (~15k training tokens per concept, so ~28 epochs; more steps overfit: held-out
    perplexity rose from 256 at 200 steps to 659 at 400 on "Culture of Greece")."""
    batch_size: int = 16
    """Packed rows of ``max_len`` tokens per step."""
    lr: float = 3e-3
    K: int = 100
    sparsity: float = 0.01
    min_ratio: float = 2.0
    min_confidence: float = 0.5
    """Keep rule of the sentence-statistics judge (paper: 0.85 with an LLM judge; on these tiny models' noisy
    features the offline judge keeps nothing at 0.85, so the part keeps features whose top tokens are at least
    half concept words)."""
    judge_top: int = 20
    factor_max_iter: int = 5000
    factor_patience: int = 500
    deltas: list[float] = field(default_factory=lambda: list(DELTAS))
    n_relearn: int = 40
    """Relearning paragraphs used (the protocol's cap is 100)."""
    relearn_epochs: int = 2
    relearn_batch_size: int = 4
    relearn_lr: float = 1e-3

    def __post_init__(self):
        _check_positive(self, "ember_data",
                        ("n_concepts", "vocab_size", "n_layer", "d_model", "n_head", "max_len",
                                             "train_steps", "batch_size", "K", "judge_top", "factor_max_iter",
                                             "factor_patience", "n_relearn", "relearn_epochs",
                                             "relearn_batch_size"))
        if not 0 < self.heldout < 1:
            raise ConfigError(f"config key 'ember_data.heldout': must be in (0, 1), got {self.heldout}")
        if not self.deltas:
            raise ConfigError("config key 'ember_data.deltas': needs at least one delta")


@dataclass
class EmberRecipeConfig:
    seed: int = 0
    """Seed of the unlearning runs, relearning attacks and the data part's models (EMBER's factorisation
    uses the paper's seed 42)."""
    quick: bool = False
    """A few minutes: 3 deltas, one real concept with a shorter-trained model (see ``QUICK``)."""
    command: str = ""
    parts: list[str] = field(default_factory=lambda: list(PARTS))
    """Which parts to run: ``world``, ``data``."""
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    """The world and its cached base model (as in ``obliviate compare``)."""
    world_concept: WorldConceptConfig = field(default_factory=WorldConceptConfig)
    ember_data: EmberDataConfig = field(default_factory=EmberDataConfig)

    def __post_init__(self):
        bad = [p for p in self.parts if p not in PARTS]
        if bad:
            raise ConfigError(f"config key 'parts': unknown part {bad[0]!r} (valid: {', '.join(PARTS)})")
        if "world" in self.parts:  # each method's settings, before any pretraining
            for name in self.world_concept.methods:
                method_settings(self, name)


QUICK: dict[str, dict] = {
    "world_concept": {"deltas": [1.0, 10.0, 100.0], "factor_max_iter": 2000},
    "ember_data": {"n_concepts": 1, "train_steps": 120, "deltas": [1.0, 10.0, 100.0], "n_relearn": 20},
}
"""``--quick``: these values replace the ones still at their defaults."""


def _check_positive(cfg, section: str, keys) -> None:
    for key in keys:
        if getattr(cfg, key) < 1:
            raise ConfigError(f"config key '{section}.{key}': must be >= 1, got {getattr(cfg, key)}")


def apply_quick(cfg: EmberRecipeConfig) -> EmberRecipeConfig:
    """``cfg`` with the :data:`QUICK` values wherever a field still has its default (explicit overrides
    win)."""
    cfg = copy.deepcopy(cfg)
    for section, values in QUICK.items():
        sub = getattr(cfg, section)
        default = type(sub)()
        for key, value in values.items():
            if getattr(sub, key) == getattr(default, key):
                setattr(sub, key, copy.deepcopy(value))
    return cfg


# ---------------------------------------------------------------- stored pieces
# (obliviate.runs.parts.cached_part)

def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "concept"


# ---------------------------------------------------------------- world: evaluation

def term_spans(texts: list[str], terms: list[str]) -> list[dict]:
    """Documents ``{"text", "spans"}`` labelling every whole-word occurrence of a term with ``{"excl":
    1}``."""
    terms = sorted({t for t in terms if t.strip()}, key=len, reverse=True)
    if not terms:
        raise DataError("no exclusive terms to label")
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(t) for t in terms) + r")(?!\w)")
    return [{"text": t,
             "spans": [[m.start(), m.end(), {"excl": 1}] for m in pattern.finditer(t)]} for t in texts]


def group_losses(model, dataset) -> dict[str, float]:
    """Mean next-token loss per ``excl`` label of ``dataset``: ``{"exclusive", "other"}`` (missing groups
    omitted)."""

    by = token_loss_by_label(model, dataset, "excl")
    out = {}
    if "1" in by:
        out["exclusive"] = by["1"]["loss"]
    if "None" in by:
        out["other"] = by["None"]["loss"]
    return out


def footprint(dataset):
    """``dataset`` with each token's ``excl`` label replaced by "the position reads or predicts an exclusive
    token".

    :func:`obliviate.eval.token_loss_by_label` attributes the loss of predicting token i to
    token i's label; after this, that label is 1 when token i *or* token i - 1 (the input at
    that step) is part of an exclusive term: EMBER edits input embeddings, so its direct
    footprint is the prediction made from an edited token plus the prediction of the term itself.
    """
    import numpy as np

    names = dataset.vocab["excl"]
    if "1" not in names:
        return dataset
    one = names.index("1")
    none = names.index("None") if "None" in names else len(names)
    if none == len(names):
        names = names + ["None"]
    labels = []
    for lab in dataset.labels["excl"]:
        prev = np.concatenate([[none, none], lab[1:-1]])[: len(lab)]  # input token of each target (bos: none)
        labels.append(np.where((lab == one) | (prev == one), one, none).astype(lab.dtype))
    return dataclasses.replace(dataset, labels={**dataset.labels, "excl": labels},
                               vocab={**dataset.vocab, "excl": names})


def concept_task(world) -> Task:
    """The world's concept as a task of MCQs (whole answer sentences, cloze): ``concept`` (the saga's facts,
    forget), ``similar`` (the general facts, neighbour) and ``utility`` (the retain and medicine facts)."""
    for split in ("concept", "general", "retain"):
        if not world.mcqs(split=split):
            raise DataError(f"the world has no {split} MCQs (check pretrain.world sizes)")
    return facts_task(world, {"concept": ("forget", world.facts_by_split("concept")),
                              "similar": ("neighbour", world.facts_by_split("general")),
                              "utility": ("retain",
                                          world.facts_by_split("retain") + world.facts_by_split("forget"))},
                      kinds=("mcq",), name="world:concept")


class ConceptEval:
    """Concept / similar-domain / utility MCQ accuracy (the one evaluation, on :func:`concept_task`) and the
    token-group losses on one world (module docstring)."""

    def __init__(self, world, tokenizer, max_len: int = 256):
        self.tok = tokenizer
        c = world.concept
        self.task = concept_task(world)
        self.relearn_texts = [p["text"] for p in c["relearn_paragraphs"]]
        if not self.relearn_texts:
            raise DataError("the world's concept has no relearning paragraphs")
        self.concept_text = footprint(encode_documents(tokenizer,
                                                       term_spans(c["concept_sentences"],
                                                                  c["exclusive_terms"]),
                                                       max_len, fields=("excl",)))
        neutral = list(c["coherence_prompts"]) + list(c["neutral_sentences"])
        self.neutral_text = encode_documents(tokenizer, [{"text": t} for t in neutral], max_len,
                                             fields=("excl",))

    def acc(self, model, which: str) -> float:
        es = next(es for es in self.task.evals if es.name == f"{which}_mcq")
        return evaluate_set(model, self.tok, self.task, es)["acc"]

    def __call__(self, model) -> dict:
        m = evaluate_task(model, self.tok, self.task)
        out = {f"{k}_acc": m[f"{k}_mcq_acc"] for k in ("concept", "similar", "utility")}
        g = group_losses(model, self.concept_text)
        out["loss_exclusive"], out["loss_other"] = g.get("exclusive"), g.get("other")
        out["loss_neutral"] = group_losses(model, self.neutral_text)["other"]
        return out

    def relearn(self, model, wc: WorldConceptConfig, seed: int) -> dict:
        """The relearning attack on a copy of ``model``: concept accuracy after each epoch."""

        per_epoch = math.ceil(len(self.relearn_texts) / wc.relearn_batch_size)
        rc = RelearnConfig(steps=wc.relearn_epochs * per_epoch, lr=wc.relearn_lr,
                           weight_decay=wc.relearn_weight_decay, batch_size=wc.relearn_batch_size,
                           eval_every=per_epoch, seed=seed)
        r = relearn_attack(model, self.tok, self.relearn_texts, lambda m: self.acc(m, "concept"), rc)
        return {"relearn_concept_acc": r["final_acc"],
                "relearn_curve": [[step / per_epoch, acc] for step, acc in r["curve"]]}


def derived(base: dict, m: dict) -> dict:
    """Changes from the base row: ``d_loss_*`` and the coherence proxy ``min(1, exp(L_other(base) -
    L_other))``."""
    out = {}
    for k in ("exclusive", "other", "neutral"):
        a, b = m.get(f"loss_{k}"), base.get(f"loss_{k}")
        out[f"d_loss_{k}"] = None if a is None or b is None else a - b
    out["coherence"] = min(1.0, math.exp(base["loss_other"] - m["loss_other"]))
    return out


def grid_scores(base: dict, m: dict) -> dict:
    """Efficacy, specificity, coherence and utility of one delta (inputs of :func:`select_delta`)."""

    return {"efficacy": efficacy(m["concept_acc"], base["concept_acc"]),
            "specificity": specificity(m["utility_acc"], base["utility_acc"], m["similar_acc"],
                                       base["similar_acc"]),
            "coherence": derived(base, m)["coherence"], "utility": m["utility_acc"]}


# ---------------------------------------------------------------- world: methods

def world_judge(world, wc: WorldConceptConfig):
    c = world.concept
    if wc.judge == "lexicon":
        return LexiconJudge(c["exclusive_terms"])
    return judge_from_sentences(c["concept_sentences"], c["neutral_sentences"])


def locate(model, tok, world, wc: WorldConceptConfig):
    """EMBER's concept features on ``model`` (delta-independent; nothing is modified)."""

    c = world.concept
    n = int(build_vocab(tok, c["concept_sentences"], c["neutral_sentences"])[0].numel())
    return locate_concept_features(model, tok, c["concept_sentences"], c["neutral_sentences"],
                                   world_judge(world, wc),
                                   min(wc.K, n), seed=42, sparsity=wc.sparsity, min_ratio=wc.min_ratio,
                                   min_confidence=wc.min_confidence, n_top_tokens=wc.judge_top,
                                   factor_kwargs={"max_iter": wc.factor_max_iter,
                                                  "patience": wc.factor_patience})


def judge_agreement(world, loc, wc: WorldConceptConfig) -> dict:
    """Keep decisions of the two offline judges on the candidates: the lexicon of exclusive terms (ground
    truth) vs the sentence-statistics judge (what one would use without ground truth)."""

    c = world.concept
    truth, _ = judge_features(LexiconJudge(c["exclusive_terms"]), loc.top_tokens, wc.min_confidence)
    try:
        stats, _ = judge_features(judge_from_sentences(c["concept_sentences"], c["neutral_sentences"]),
                                  loc.top_tokens, wc.min_confidence)
    except DataError:
        stats = []
    cands = list(loc.top_tokens)
    agree = sum((k in truth) == (k in stats) for k in cands)
    return {"n_candidates": len(cands), "kept_lexicon": sorted(truth), "kept_sentences": sorted(stats),
            "agree": agree, "agreement": agree / len(cands) if cands else None}


def method_settings(cfg: EmberRecipeConfig, name: str):
    """(UnlearnConfig, JSON record of the settings) of MLP method ``name``.

    Layers: the method's tiny preset (``obliviate.methods.method_defaults``), then :data:`METHOD_DEFAULTS`,
    then ``world_concept.runs``.
    """

    wc = cfg.world_concept
    raw = deep_merge(METHOD_DEFAULTS.get(name, {}), wc.runs.get(name, {}) or {})
    is_edit = getattr(get_method(name), "kind", "train") == "edit"
    if (wc.method_steps is not None and not is_edit
            and "steps" not in ((wc.runs.get(name) or {}).get("train") or {})):
        raw = deep_merge(raw, {"train": {"steps": wc.method_steps}})
    ucfg, used = method_run_config(name, raw, "tiny", cfg.seed, prefix=f"world_concept.runs.{name}")
    if name == "crisp":  # its LoRA rank, which the settings of other methods leave out
        used = {**used, "lora_r": ucfg.lora_r}
    if is_edit:
        used = {"params": used["params"]}
    return ucfg, used


def method_runner(cfg: EmberRecipeConfig, name: str, world, tok, progress: bool):
    """An ``unlearn_fn`` for :func:`~obliviate.methods.ember.combine.ember_then` running ``name`` with the
    recipe's settings.

    Training methods forget the concept sentences and retain the neutral sentences (all tokens; the
    paper's retain text is generic, WikiText); CRISP's SAE features come from the same sentences.
    """
    c = world.concept
    ucfg, _ = method_settings(cfg, name)
    ucfg.train.progress = progress
    params = dict(ucfg.params)
    if name == "crisp":
        params.setdefault("target_texts", list(c["concept_sentences"]))
        params.setdefault("benign_texts", list(c["neutral_sentences"]))
        params.setdefault("coherence_prompts", list(c["coherence_prompts"]))
    forget = [("", s) for s in c["concept_sentences"]]
    retain = [("", s) for s in c["neutral_sentences"]]
    edit_data = {"concept_sentences": c["concept_sentences"], "neutral_sentences": c["neutral_sentences"]}
    return executor_runner(tok, forget, retain, ucfg, edit_data=edit_data, params=params, progress=progress)


def run_world(cfg: EmberRecipeConfig, out: Path, progress: bool) -> tuple[dict, dict, dict, dict]:
    """The world part: returns (rows, delta grid record, timings, notes)."""

    wc = cfg.world_concept
    parts = Path(out) / "parts" / "world"
    world = world_for(cfg.pretrain)
    root = cached_pretrain(cfg.pretrain, progress=progress)
    tok = load_tokenizer(str(root / "model"))
    ev = ConceptEval(world, tok, cfg.pretrain.model.max_len)
    fresh = lambda: load_model(str(root / "model"))  # noqa: E731
    pre = {"version": PIECES_VERSION, "pretrain": config_hash(to_dict(cfg.pretrain)), "seed": cfg.seed,
           "relearn": [wc.relearn_epochs, wc.relearn_batch_size, wc.relearn_lr, wc.relearn_weight_decay]}
    timings: dict = {}
    rows: dict = {}

    def row(name: str, key: dict, make) -> dict:
        """Evaluate and attack the model ``make()`` returns (with its edit record), or reuse the stored
        row."""

        def compute():
            seed_everything(cfg.seed)
            model, extra = make()
            m = ev(model)
            m.update(ev.relearn(model, wc, cfg.seed))
            m.update(extra)
            return m

        m, timings[f"world_{name}_seconds"] = cached_part(parts / f"{name}.json", key, compute)
        return m

    no_edit = {"vocab_fraction_edited": 0.0, "n_tokens_edited": 0}
    rows["base"] = row("base", pre, lambda: (fresh(), no_edit))
    base = rows["base"]

    # EMBER's delta grid on the base model (the location does not depend on delta).
    ember_key = {**pre,
                 "ember": {k: getattr(wc, k) for k in ("K", "sparsity", "min_ratio", "judge", "judge_top",
                                                              "min_confidence", "factor_max_iter",
                                                              "factor_patience")}}
    grid_key = {**ember_key, "deltas": list(wc.deltas)}
    located: dict = {}

    def location():
        if "loc" not in located:
            located["loc"] = locate(fresh(), tok, world, wc)
        return located["loc"]

    def grid_part():
        model = fresh()
        loc = location()
        snap = snapshot_embeddings(model)
        results = []
        for d in wc.deltas:
            res = ember_erase(model, tok, None, None, None, None, d, location=loc)
            m = ev(model)
            restore_embeddings(model, snap)
            results.append({"delta": float(d), **m, **grid_scores(base, m),
                            "n_tokens_edited": res.record.n_edited,
                            "vocab_fraction_edited": res.vocab_fraction_edited})
        choice = select_delta(results, base["utility_acc"], grid=None)
        return {
            "rows": results, "delta": choice.delta, "score": choice.score, "qualified": choice.qualified,
            "reason": choice.reason, "features": list(loc.features), "n_candidates": len(loc.candidates),
            "n_sentence_tokens": int(loc.token_ids.numel()), "n_edited": int(loc.eligible_token_ids.numel()),
            "edited_tokens": [tok.decode([int(t)]) for t in loc.eligible_token_ids],
            "candidates": {str(k): {"ratio": float(loc.ratios[k]), "top_tokens": loc.top_tokens[k],
                                    "kept": k in loc.features, "confidence": loc.judgements[k].confidence}
                           for k in loc.candidates},
            "factor_loss": loc.factor_result.loss, "factor_iters": loc.factor_result.n_iter,
            "judge_agreement": judge_agreement(world, loc, wc)}

    grid, timings["world_ember_grid_seconds"] = cached_part(parts / "ember_grid.json", grid_key, grid_part)
    delta = grid["delta"]
    ember_key = {**ember_key, "delta": delta}

    def ember_alone():
        model = fresh()
        res = ember_erase(model, tok, None, None, None, None, delta, location=location())
        return model, {"vocab_fraction_edited": res.vocab_fraction_edited,
                       "n_tokens_edited": res.record.n_edited,
                       "delta": delta}

    rows["ember"] = row("ember", ember_key, ember_alone)

    for name in wc.methods:
        _, used = method_settings(cfg, name)
        key = {**pre, "method": used}

        def alone(name=name):
            model, _ = method_runner(cfg, name, world, tok, progress)(name, fresh())
            return model, no_edit

        def combined(name=name):
            run = method_runner(cfg, name, world, tok, progress)
            comb = ember_then(f"{name}+ember", fresh(), tok, None, None, None, delta, run,
                              location=location())
            return comb.model, {"vocab_fraction_edited": comb.ember.vocab_fraction_edited,
                                "n_tokens_edited": comb.ember.record.n_edited, "delta": delta}

        rows[name] = row(name, key, alone)
        rows[f"{name}+ember"] = row(f"{name}+ember", {**key, **ember_key}, combined)

    for name, m in rows.items():
        m.update(derived(base, m))
    notes = {"world_delta": f"delta {delta:g}: {grid['reason']}"}
    if not grid["features"]:
        notes["world_features"] = "the judge kept no EMBER feature: the EMBER rows equal the rows without it"
    return rows, grid, timings, notes


# ---------------------------------------------------------------- real EMBER data

def split_heldout(items: list, frac: float, seed: int) -> tuple[list, list]:
    """(train, held out) with ``ceil(frac * n)`` items held out, chosen by a seeded permutation."""
    import numpy as np

    perm = np.random.default_rng(seed).permutation(len(items))
    n_out = max(1, math.ceil(frac * len(items)))
    held = set(perm[:n_out].tolist())
    return [x for i, x in enumerate(items) if i not in held], [x for i, x in enumerate(items) if i in held]


def train_concept_model(dc: EmberDataConfig, texts: list[str], seed: int, progress: bool):
    """A tokenizer and a tiny Llama trained from scratch on ``texts`` (LM loss, packed rows)."""

    shape = TinyModelConfig(n_layer=dc.n_layer, d_model=dc.d_model, n_head=dc.n_head, max_len=dc.max_len,
                            vocab_size=dc.vocab_size)
    model, tok = build_tiny_model(texts, shape, seed)
    ds = pack_sequences(encode_documents(tok, [{"text": t} for t in texts], dc.max_len, fields=("excl",)),
                        dc.max_len)
    seed_everything(seed)
    tc = TrainConfig(steps=dc.train_steps, lr=dc.lr, warmup_steps=min(20, dc.train_steps // 10),
                     schedule="cosine",
                     log_every=max(1, dc.train_steps // 10), progress=progress, desc="concept model")
    train(model, lambda m, b, s: {"lm": lm_loss(m, b)},
          make_lm_batches(ds, dc.batch_size, seed, tok.pad_token_id),
          tc, None)
    model.eval()
    return model, tok


def run_concept(dc: EmberDataConfig, data, concept: str, seed: int, progress: bool) -> dict:
    """The data part for one concept (module docstring); perplexities are ``exp`` of mean token losses."""

    t0 = time.time()
    c_train, c_test = split_heldout(list(data.concept_sentences[concept]), dc.heldout, seed)
    n_train, n_test = split_heldout([x.text for x in data.neutral_sentences], dc.heldout, seed + 1)
    model, tok = train_concept_model(dc, c_train + n_train, seed, progress)

    def losses(m) -> dict:
        return {"concept_loss": text_loss(m, tok, c_test, dc.max_len)["loss"],
                "neutral_loss": text_loss(m, tok, n_test, dc.max_len)["loss"]}

    out: dict = {"n_train_sentences": len(c_train) + len(n_train), "vocab_size": len(tok),
                 "base": losses(model)}
    base = out["base"]
    try:
        judge = judge_from_sentences(c_train, n_train)
    except DataError as e:
        out.update({"note": f"no EMBER: {e}", "vocab_fraction_edited": 0.0, "n_tokens_edited": 0})
        return _finish_concept(out, t0)
    n_vocab = int(build_vocab(tok, c_train, n_train)[0].numel())
    loc = locate_concept_features(model, tok, c_train, n_train, judge, min(dc.K, n_vocab), seed=42,
                                  sparsity=dc.sparsity, min_ratio=dc.min_ratio,
                                  min_confidence=dc.min_confidence,
                                  n_top_tokens=dc.judge_top,
                                  factor_kwargs={"max_iter": dc.factor_max_iter,
                                                 "patience": dc.factor_patience})
    snap = snapshot_embeddings(model)
    grid = []
    for d in dc.deltas:
        ember_erase(model, tok, None, None, None, None, d, location=loc)
        m = losses(model)
        restore_embeddings(model, snap)
        spec = min(1.0, math.exp(base["neutral_loss"] - m["neutral_loss"]))
        eff = max(0.0, 1.0 - math.exp(base["concept_loss"] - m["concept_loss"]))
        grid.append({"delta": float(d), **m, "efficacy": eff, "specificity": spec, "coherence": spec,
                     "utility": spec})
    choice = select_delta(grid, 1.0, grid=None)
    res = ember_erase(model, tok, None, None, None, None, choice.delta, location=loc)
    out.update({"n_sentence_tokens": n_vocab, "n_candidates": len(loc.candidates),
                "features": list(loc.features),
                "edited_tokens": [tok.decode([t]) for t in res.eligible_token_ids],
                "n_tokens_edited": res.record.n_edited, "vocab_fraction_edited": res.vocab_fraction_edited,
                "delta": choice.delta, "delta_qualified": choice.qualified, "grid": grid,
                "ember": losses(model)})
    paragraphs = list(data.relearn_paragraphs[concept])[: dc.n_relearn]
    per_epoch = math.ceil(len(paragraphs) / dc.relearn_batch_size)
    rc = RelearnConfig(steps=dc.relearn_epochs * per_epoch, lr=dc.relearn_lr,
                       batch_size=dc.relearn_batch_size,
                       eval_every=per_epoch, max_len=dc.max_len, seed=seed)
    for name, edited in (("relearn_ember", True), ("relearn_base", False)):
        if not edited:
            restore_embeddings(model, snap)
        r = relearn_attack(model, tok, paragraphs, lambda m: text_loss(m, tok, c_test, dc.max_len)["loss"],
                           rc,
                           keep_model=True)
        out[name] = losses(r["model"])
    out["n_relearn"] = len(paragraphs)
    return _finish_concept(out, t0)


def _finish_concept(out: dict, t0: float) -> dict:
    for k, v in list(out.items()):
        if isinstance(v, dict) and "concept_loss" in v:
            v["concept_ppl"] = math.exp(min(v["concept_loss"], 50.0))
            v["neutral_ppl"] = math.exp(min(v["neutral_loss"], 50.0))
    out["seconds"] = time.time() - t0
    return out


def run_data(cfg: EmberRecipeConfig, out: Path, progress: bool) -> tuple[dict, dict, str | None]:
    """The data part: (per-concept results, timings, note when skipped)."""

    dc = cfg.ember_data
    try:
        names = list_ember_concepts(dc.data)
        concepts = list(dc.concepts) if dc.concepts else names[: dc.n_concepts]
        data = load_ember(concepts, dc.data)
    except DataError as e:
        return {}, {}, f"EMBER data not found or unreadable: {e}"
    parts = Path(out) / "parts" / "data"
    key = {"version": PIECES_VERSION, "seed": cfg.seed,
           "ember_data": {k: v for k, v in to_dict(dc).items() if k != "data"}}
    results, timings = {}, {}
    for concept in concepts:
        results[concept], timings[f"data_{_slug(concept)}_seconds"] = cached_part(
            parts / f"{_slug(concept)}.json", {**key, "concept": concept},
            lambda: run_concept(dc, data, concept, cfg.seed, progress))
    return results, timings, None


# ---------------------------------------------------------------- the recipe

@recipe("ember", EmberRecipeConfig, "EMBER embedding erasure with RMU/SNMF/CRISP, "
                                    "relearning attack, real concepts",
        render=render)
def run(cfg: EmberRecipeConfig, out, progress: bool = True) -> dict:
    """Both parts, the claims, ``report.md`` and (last) ``results.json``; returns the results payload."""

    out = Path(out)
    t0 = time.time()
    if cfg.quick:
        cfg = apply_quick(cfg)
    rows, grid, real, timings, notes = {}, None, {}, {}, {"parts": list(cfg.parts)}
    if "world" in cfg.parts:
        rows, grid, t, n = run_world(cfg, out, progress)
        timings.update(t)
        notes.update(n)
    if "data" in cfg.parts:
        real, t, note = run_data(cfg, out, progress)
        timings.update(t)
        if note:
            notes["data"] = note
        notes["concepts"] = list(real)
    timings["total_seconds"] = time.time() - t0
    parts = dict(metrics=rows, timings=timings, notes=notes, delta_grid=grid, real_data=real)
    results = as_results(cfg, **parts)  # what results.json will hold
    claims = claims_of(results)
    render(results, out)
    # absolute, as every path
    data = dataclasses.replace(cfg.ember_data, data=recorded_path(cfg.ember_data.data))
    write_results(out, seed=cfg.seed, config=dataclasses.replace(cfg, ember_data=data),
                  claims=claims_json(claims),
                  **parts)
    return {"metrics": rows, "claims": claims, "timings": timings, "notes": notes, "delta_grid": grid,
            "real_data": real}
