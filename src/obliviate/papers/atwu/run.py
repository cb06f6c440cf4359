"""The ATWU recipe's experiments (:mod:`obliviate.papers.atwu`); claims and report have their own modules."""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from obliviate.config import config_hash, deep_merge, to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import evaluate_task, score_against
from obliviate.eval.token_scores import token_score_aurocs
from obliviate.eval.uq import unlearning_quality
from obliviate.unlearning.engine import method_run_config, unlearn
from obliviate.methods import get_method
from obliviate.models.load import load_model, load_tokenizer
from obliviate.train.pretrain import PretrainConfig, cached_pretrain, world_for
from obliviate.papers import as_results, claims_json, recipe
from obliviate.papers.atwu.claims import is_scored, make_claims
from obliviate.papers.atwu.report import render
from obliviate.runs.parts import cached_part
from obliviate.runs.results import write_results
from obliviate.tasks.world import task_from_world
from obliviate.pipelines.tofu import (TofuConfig, check_tofu_data, prepare_bases, unlearn_and_evaluate,
                                      unlearn_config)
from obliviate.utils import seed_everything

METHODS = ["atwu", "graddiff", "npo", "simnpo", "wga", "atwu_npo", "atwu_simnpo"]
QUICK_METHODS = ["atwu", "graddiff", "npo", "atwu_npo"]
PARTS = ("world", "tofu")
RUN_DEFAULTS: dict[str, dict] = {"atwu_npo": {"train": {"lr": 3e-4}}}
"""Recipe defaults under the user's ``runs`` / ``tofu_runs``: a weighted objective gets its base objective's
learning rate (its tiny preset, ``obliviate.methods.method_defaults``; ``atwu_simnpo`` already shares
SimNPO's)."""
SCORER_DEFAULTS: dict = {"position": "token"}
"""Scorer settings of every ATWU method in this recipe (tuned on world seed 0; see the module docstring)."""
WORLD_SETS = ("forget_qa", "forget_para_qa", "forget_mcq", "retain_qa", "general_qa", "retain_mcq",
              "general_mcq")
"""The world task's evaluation sets scored: F is ``forget_score`` (forget QA), R ``retain_score`` (the mean of
retain and general QA)."""


@dataclass
class AtwuRecipeConfig:
    seed: int = 0
    """Seed of the world part's unlearning runs (the world and its base model: ``pretrain.*``)."""
    quick: bool = False
    """World part only, with ``quick_methods`` (a few minutes)."""
    command: str = ""
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    """Methods compared; those named ``atwu*`` have learned token scores."""
    quick_methods: list[str] = field(default_factory=lambda: list(QUICK_METHODS))
    parts: list[str] = field(default_factory=lambda: list(PARTS))
    """Which parts to run: ``world``, ``tofu``."""
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    """The world and its cached base model (as in ``obliviate demo``)."""
    runs: dict = field(default_factory=dict)
    """World unlearning settings per method (as ``obliviate compare``'s ``runs``):
    ``runs.atwu.train.lr=5e-4``, ``runs.atwu.params.w_lr=1e-2``."""
    tofu: TofuConfig = field(default_factory=TofuConfig)
    """The TOFU protocol's data, models and evaluation (keep the defaults to reuse ``obliviate tofu``'s cached
    base models); ``tofu.method`` and ``tofu.unlearn`` are unused (see ``tofu_runs``)."""
    tofu_runs: dict = field(default_factory=dict)
    """TOFU unlearning settings per method: ``tofu_runs.atwu.train.steps=100``."""
    token_auroc_on: Literal["base", "unlearned"] = "base"
    """Whose hidden states the learned scorer (final w, b) reads for ``token_auroc``: the original model's
    (the labels and the probability baseline refer to it) or the unlearned model's; the other is reported as
    ``token_auroc_<other>``."""
    tofu_uq_from: Literal["rouge_l", "prob"] = "rouge_l"
    """F and R of TOFU's FQ/RD/UQ: forget10 / retain ROUGE-L recall of greedy answers, or TOFU probability."""
    near_utility: float = 0.1
    """"Utility kept near the original" means a relative utility drop of at most this much."""

    def __post_init__(self):
        for name in list(self.methods) + list(self.quick_methods):
            get_method(name)  # unknown names fail before any training
        bad = [p for p in self.parts if p not in PARTS]
        if bad:
            raise ConfigError(f"config key 'parts': unknown part {bad[0]!r} (valid: {', '.join(PARTS)})")
        for key in ("runs", "tofu_runs"):
            for name in getattr(self, key):
                if name not in self.methods and name not in self.quick_methods:
                    raise ConfigError(f"config key '{key}.{name}': '{name}' is not among the methods")
        if not 0.0 <= self.near_utility <= 1.0:
            raise ConfigError(f"config key 'near_utility': must be in [0, 1], got {self.near_utility}")


def method_runs(cfg: AtwuRecipeConfig, name: str, which: str = "runs") -> dict:
    """The run overrides of ``name``: recipe defaults (:data:`RUN_DEFAULTS`, :data:`SCORER_DEFAULTS` for the
    ATWU methods), then the user's ``runs.<name>`` (or ``tofu_runs.<name>``)."""

    base = copy.deepcopy(RUN_DEFAULTS.get(name, {}))
    if is_scored(name):
        base = deep_merge(base, {"params": dict(SCORER_DEFAULTS)})
    return deep_merge(base, copy.deepcopy(getattr(cfg, which).get(name, {}) or {}))


def uq_metrics(f0: float, fu: float, r0: float, ru: float) -> dict:
    """{fq, rd, uq} (:func:`obliviate.eval.uq.unlearning_quality`); None where F0 or R0 is not positive."""

    if f0 <= 0 or r0 <= 0:
        return {"fq": None, "rd": None, "uq": None}
    return unlearning_quality(f0, fu, r0, ru)


def check_runs(cfg: AtwuRecipeConfig, methods: list[str], parts: list[str]) -> None:
    """Every method's run settings and method parameters, in each part that runs, fail here before any
    training."""

    for name in methods:
        for part, which in (("world", "runs"), ("tofu", "tofu_runs")):
            if part in parts:
                method_run_config(name, method_runs(cfg, name, which), "tiny", cfg.seed,
                                  prefix=f"{which}.{name}")


# ---------------------------------------------------------------- world

def run_world(cfg: AtwuRecipeConfig, methods: list[str], out: Path, progress: bool) -> tuple[dict, dict]:
    """The world part: returns (metrics, timings)."""

    parts = out / "parts" / "world"
    world = world_for(cfg.pretrain)
    task = task_from_world(world)
    task = dataclasses.replace(task, evals=[es for es in task.evals if es.name in WORLD_SETS])
    root = cached_pretrain(cfg.pretrain, progress=progress)
    tok = load_tokenizer(str(root / "model"))
    base_model = load_model(str(root / "model"))
    facts = world.facts_by_split("forget")
    pre_key = {"pretrain": config_hash(to_dict(cfg.pretrain))}
    timings: dict = {}

    def base_part():
        return {"metrics": evaluate_task(base_model, tok, task),
                "token_aurocs": token_score_aurocs(base_model, tok, facts,
                                                   corpus_texts=[d["text"] for d in world.documents()])}

    base, timings["world_base_seconds"] = cached_part(parts / "base.json", pre_key, base_part)
    metrics: dict = {"base": dict(base["metrics"])}
    aur = base["token_aurocs"]
    metrics["token_baselines"] = {n: {"token_auroc": aur[n]} for n in ("uniform", "probability", "rarity")}
    metrics["token_labels"] = {"n_specific": aur["n_specific"], "n_structural": aur["n_structural"]}
    b = metrics["base"]

    for name in methods:
        ucfg, used = method_run_config(name, method_runs(cfg, name), "tiny", cfg.seed)
        key = {**pre_key, "seed": cfg.seed, "run": used}

        def method_part():
            seed_everything(cfg.seed)
            model = load_model(str(root / "model"))
            model, summary = unlearn(model, tok, task.forget, task.retain, ucfg, None, prompt=task.prompt,
                                     progress=progress, resume=False)
            m = evaluate_task(model, tok, task)
            m.update(score_against(b, m))
            m.update(uq_metrics(b["forget_score"], m["forget_score"], b["retain_score"], m["retain_score"]))
            method = summary["method_obj"]
            if hasattr(method, "token_scores"):
                read = {w: token_score_aurocs(mdl, tok, facts, {"learned": method.token_scores})["learned"]
                        for w, mdl in (("base", base_model), ("unlearned", model))}
                m["token_auroc_base"], m["token_auroc_unlearned"] = read["base"], read["unlearned"]
                m["score_mean"] = method.scorer.last.get("z_mean")
            return m

        m, timings[f"world_{name}_seconds"] = cached_part(parts / f"{name}.json", key, method_part)
        metrics[name] = dict(m)
        if "token_auroc_base" in metrics[name]:
            metrics[name]["token_auroc"] = metrics[name][f"token_auroc_{cfg.token_auroc_on}"]
    return metrics, timings


# ---------------------------------------------------------------- TOFU

def tofu_method_config(cfg: AtwuRecipeConfig, name: str) -> TofuConfig:
    """``cfg.tofu`` for method ``name`` with the recipe's defaults and its ``tofu_runs`` overrides."""

    return dataclasses.replace(cfg.tofu, method=name, unlearn=method_runs(cfg, name, "tofu_runs"))


def _tofu_row(m: dict, prefix: str = "tofu_") -> dict:
    keys = ("forget_quality", "model_utility", "retain_utility", "forget10_rouge_l", "retain_rouge_l",
            "forget_prob",
            "retain_prob", "forget_truth_ratio")
    return {f"{prefix}{k}": m.get(k) for k in keys}


def run_tofu_part(cfg: AtwuRecipeConfig, methods: list[str], out: Path, progress: bool) -> tuple[dict, dict]:
    """The TOFU part: returns (metrics, timings); metrics keys are prefixed ``tofu_``."""

    parts = out / "parts" / "tofu"
    configs = {name: tofu_method_config(cfg, name) for name in methods}
    for c in configs.values():
        unlearn_config(c)  # bad overrides fail before any training
    bases = prepare_bases(cfg.tofu, progress=progress)
    timings = {f"tofu_{k}": v for k, v in bases.timings.items()}
    f_key, r_key = ("forget_rouge_l",
                    "retain_rouge_l") if cfg.tofu_uq_from == "rouge_l" else ("forget_prob", "retain_prob")
    b = bases.metrics["base"]
    metrics: dict = {"base": _tofu_row(b), "tofu_retain_model": _tofu_row(bases.metrics["retain_model"])}
    base_key = {"bases": {k: v.name for k, v in bases.roots.items()}, "limit": cfg.tofu.limit,
                "max_new_tokens": cfg.tofu.max_new_tokens, "uq_from": cfg.tofu_uq_from}
    for name in methods:
        key = {**base_key, "unlearn": to_dict(unlearn_config(configs[name]))}

        def method_part():
            _, res, *_ = unlearn_and_evaluate(configs[name], bases, None, progress=progress)
            m = _tofu_row(res)
            m.update({f"tofu_{k}": v for k,
                      v in uq_metrics(b[f_key], res[f_key], b[r_key], res[r_key]).items()})
            return m

        metrics[name], timings[f"tofu_{name}_seconds"] = cached_part(parts / f"{name}.json", key, method_part)
    return metrics, timings


# ---------------------------------------------------------------- claims

# ---------------------------------------------------------------- the recipe

@recipe("atwu", AtwuRecipeConfig, "ATWU (learned token importance) vs "
                                  "GradDiff/NPO/SimNPO/WGA on the world and TOFU",
        render=render)
def run(cfg: AtwuRecipeConfig, out, progress: bool = True) -> dict:
    """Both parts, the claims, ``report.md`` and (last) ``results.json``; returns the results payload."""

    out = Path(out)
    t0 = time.time()
    parts = ["world"] if cfg.quick else list(cfg.parts)
    methods = list(cfg.quick_methods if cfg.quick else cfg.methods)
    metrics: dict = {n: {} for n in methods}
    metrics["base"] = {}
    timings: dict = {}
    tofu_note = None
    check_runs(cfg, methods, parts)
    if "world" in parts:
        m, t = run_world(cfg, methods, out, progress)
        for k, v in m.items():
            metrics.setdefault(k, {}).update(v)
        timings.update(t)
    if "tofu" in parts:
        try:
            check_tofu_data(cfg.tofu.data)
        except DataError as e:
            tofu_note = f"{e}."
        if tofu_note is None:
            m, t = run_tofu_part(cfg, methods, out, progress)
            for k, v in m.items():
                metrics.setdefault(k, {}).update(v)
            timings.update(t)
    tofu_ran = "tofu" in parts and tofu_note is None
    timings["total_seconds"] = time.time() - t0
    notes = {"parts": parts, "methods": methods, "tofu": "ran" if tofu_ran else (tofu_note or "not "
    "requested")}
    results = as_results(cfg, metrics=metrics, timings=timings, notes=notes)  # what results.json will hold
    claims = make_claims(results)
    render(results, out)
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, claims=claims_json(claims),
                  timings=timings,
                  notes=notes)
    return {"metrics": metrics, "claims": claims, "timings": timings, "notes": notes}
