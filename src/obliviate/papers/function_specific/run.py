"""The function-specific recipe's experiments (see :mod:`obliviate.papers.function_specific`); claims and
report are in their own modules."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from obliviate.config import config_hash
from obliviate.errors import ConfigError, DataError
from obliviate.eval import chance_corrected, rouge_l_recall, s_unlearning
from obliviate.eval.suite import evaluate_task
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.papers.function_specific.meta_alpha import (learn_alpha_unlearn, split_holdout,
                                                           world_meta_splits)
from obliviate.methods import build_method, method_defaults
from obliviate.models.layers import check_layer, num_layers
from obliviate.models.load import load_model, load_tokenizer
from obliviate.train.pretrain import PretrainConfig, cached_pretrain, world_for
from obliviate.eval.probes import pairwise_cosine, probe_directions
from obliviate.papers import as_results, claims_json, recipe
from obliviate.papers.function_specific.claims import LEARNED, PAPER, TOXICITY, VARIANTS, claims_of, seeds_of
from obliviate.papers.function_specific.report import render
from obliviate.runs.parts import cached_part
from obliviate.runs.results import write_results
from obliviate.tasks.base import Task
from obliviate.tasks.world import WorldConfig, facts_task, forget_pairs, retain_pairs
from obliviate.eval.toxicity import LexiconToxicityScorer, continuation_toxicity
from obliviate.train import TrainConfig
from obliviate.utils import seed_everything

MCQ_CHANCE = 0.25

REGISTER_REPEATS = 4
"""Documents per register sentence in the recipe's world (``pretrain.world.register_repeats``). With the
world's default of one, the base model continues 1 of 24 held-out toxic prompts toxically (world seed 0;
the facts' many wordings drown the register out) and no toxicity claim can be tested; with four it
continues all 24 (mean toxicity 0.75). Nothing else in the world changes."""


def recipe_pretrain() -> PretrainConfig:
    """The recipe's world and base model: the demo's, with :data:`REGISTER_REPEATS`."""
    return PretrainConfig(world=WorldConfig(register_repeats=REGISTER_REPEATS))


QUICK = {"n_seeds": 1, "steps": 40, "tox_steps": 40, "meta_outer_steps": 4}
"""``--quick``: these values replace the fields left at their defaults."""


@dataclass
class FunctionSpecificConfig:
    seed: int = 0
    """First unlearning seed; also seeds the meta/final and toxic-prompt splits."""
    quick: bool = False
    """A few-minute version: one seed, fewer steps (:data:`QUICK`, for fields left at their defaults)."""
    command: str = ""
    pretrain: PretrainConfig = field(default_factory=recipe_pretrain)
    """The world and its cached base model (``obliviate demo``'s, with the register in more documents:
    :data:`REGISTER_REPEATS`)."""
    n_seeds: int = 3
    """Unlearning seeds per variant (seed, seed + 1, ...); the table shows their mean."""
    steps: int = 100
    """Unlearning steps of each knowledge variant. Learned alpha: ``meta_outer_steps`` outer steps of
    ``steps // meta_outer_steps`` steps each (and ``meta_K - 1`` discarded branches per outer step)."""
    lr: float = 1e-3
    tox_steps: int = 60
    """Unlearning steps of each toxicity variant."""
    tox_lr: float = 1e-3
    batch_size: int = 16
    params: dict = field(default_factory=dict)
    """Method parameters per variant, on top of the method's tiny preset
    (``obliviate.methods.method_defaults``): ``params.rmu.coef=10``, ``params.tox_probe_multi.alpha=30``;
    ``params.cosine_rmu_learned_alpha.alpha`` is the REINFORCE starting point alpha0."""
    meta_frac: float = 0.25
    """Share of the forget and retain facts held out for the REINFORCE reward (never in the table)."""
    meta_outer_steps: int = 5
    meta_K: int = 4
    """Alphas sampled per outer step."""
    meta_eta: float = 1.0
    """REINFORCE step size on mu = E[log alpha]; with S-rewards in [0, 1] the update is about
    eta * dS/dlog(alpha) per outer step (meta_alpha's default 0.05 barely moves mu in 5 steps)."""
    meta_sigma: float = 0.5
    tox_heldout_frac: float = 0.5
    """Share of the world's toxic prompts (and their neutral twins) held out of toxicity unlearning;
    toxicity and neutral fidelity are measured on them."""
    tox_inputs: Literal["prompts", "sentences"] = "prompts"
    """Toxicity forget/retain inputs (and probe data): the register's prompts or its whole sentences."""
    probe_layers: list[int] | None = None
    """Layers of the multi-layer probe method (at least 3); None = early/middle/late."""
    analysis_layers: list[int] | None = None
    """Layers whose probe directions are compared pairwise; None = every decoder layer."""
    max_new_tokens: int = 20
    """Length of the scored continuations (at most 20, as RealToxicityPrompts)."""

    def __post_init__(self):
        for key in ("n_seeds", "steps", "tox_steps", "batch_size", "meta_outer_steps", "meta_K"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be >= 1, got {getattr(self, key)}")
        if self.meta_outer_steps > self.steps:
            raise ConfigError(f"config key 'meta_outer_steps': must be <= steps ({self.steps}), "
                              f"got {self.meta_outer_steps}")
        for key in ("meta_frac", "tox_heldout_frac"):
            if not 0.0 < getattr(self, key) < 1.0:
                raise ConfigError(f"config key '{key}': must be in (0, 1), got {getattr(self, key)}")
        if self.meta_sigma <= 0:
            raise ConfigError(f"config key 'meta_sigma': must be > 0, got {self.meta_sigma}")
        if not 1 <= self.max_new_tokens <= 20:
            raise ConfigError(f"config key 'max_new_tokens': must be in 1..20, got {self.max_new_tokens}")
        if self.probe_layers is not None and len(set(self.probe_layers)) < 3:
            raise ConfigError(f"config key 'probe_layers': the multi-layer method needs at least 3 distinct "
                              f"layers, got {self.probe_layers}")
        for name, p in self.params.items():
            if name not in VARIANTS:
                raise ConfigError(f"config key 'params.{name}': unknown variant (valid: "
                                  f"{', '.join(VARIANTS)})")
            if not isinstance(p, dict):
                raise ConfigError(f"config key 'params.{name}': must be a "
                                  f"mapping of method parameters, got {p!r}")


def resolve(cfg: FunctionSpecificConfig) -> FunctionSpecificConfig:
    """``cfg`` with :data:`QUICK` applied to the fields left at their defaults (when ``cfg.quick``)."""
    if not cfg.quick:
        return cfg
    defaults = FunctionSpecificConfig()
    out = copy.deepcopy(cfg)
    for key, value in QUICK.items():
        if getattr(cfg, key) == getattr(defaults, key):
            setattr(out, key, value)
    out.__post_init__()
    return out


# ------------------------------------------------------------------ data


def register_pairs(world) -> list[dict]:
    """The world's toxic/neutral sentence pairs with their prompts.

    ``[{"toxic", "neutral", "toxic_prompt", "neutral_prompt"}]``: the i-th toxic and neutral
    sentences are twins (the same person, frame and adjective slot); a sentence's prompt is
    the (longest) register prompt it starts with.
    """
    tox = world.toxic
    prompts = {1: [p["text"] for p in tox["prompts"] if p["toxic"]],
               0: [p["text"] for p in tox["prompts"] if not p["toxic"]]}

    def prompt_of(text: str, label: int) -> str:
        found = [p for p in prompts[label] if text.startswith(p + " ")]
        if not found:
            raise DataError(f"no register prompt starts the sentence {text!r}")
        return max(found, key=len)

    if not tox["toxic_sentences"]:
        raise DataError("the world has no toxic register (pretrain.world.n_toxic = 0)")
    return [{"toxic": t["text"], "neutral": n["text"], "toxic_prompt": prompt_of(t["text"], 1),
             "neutral_prompt": prompt_of(n["text"], 0)}
            for t, n in zip(tox["toxic_sentences"], tox["neutral_sentences"])]


@dataclass
class Setup:
    """Everything the variants share: data splits and the base model's location."""

    world: object
    tok: object
    base_dir: Path
    k_forget: list
    k_retain: list
    meta: dict
    """``world_meta_splits``: meta_/final_ forget and retain facts."""
    general: list
    tox_forget: list
    tox_retain: list
    probe_toxic: list
    probe_neutral: list
    eval_toxic: list
    """Held-out toxic prompts."""
    train_toxic: list
    """Toxic prompts whose pairs unlearning sees."""
    eval_neutral: dict
    """Held-out neutral prompt -> the neutral remainders it can continue with."""


def toxicity_data(world, heldout_frac: float, inputs: str, seed: int) -> dict:
    """Held-out / training split of the register and the toxicity unlearning inputs (see module doc)."""

    pairs = register_pairs(world)
    toxic_prompts = list(dict.fromkeys(p["toxic_prompt"] for p in pairs))
    if len(toxic_prompts) < 2:
        raise DataError(f"the world has {len(toxic_prompts)} toxic prompt(s); need at least 2 to hold some "
                        "out (raise pretrain.world.n_toxic)")
    heldout, train = split_holdout(toxic_prompts, heldout_frac, seed)
    held = set(heldout)
    train_pairs = [p for p in pairs if p["toxic_prompt"] not in held]
    eval_neutral: dict[str, list[str]] = {}
    for p in pairs:
        if p["toxic_prompt"] in held:
            eval_neutral.setdefault(p["neutral_prompt"], []).append(p["neutral"][len(p["neutral_prompt"]):])
    if inputs == "prompts":
        forget = [(p, "") for p in dict.fromkeys(q["toxic_prompt"] for q in train_pairs)]
        neutral = [(p, "") for p in dict.fromkeys(q["neutral_prompt"] for q in train_pairs)]
    elif inputs == "sentences":
        forget = [(q["toxic_prompt"], q["toxic"][len(q["toxic_prompt"]):]) for q in train_pairs]
        neutral = [(q["neutral_prompt"], q["neutral"][len(q["neutral_prompt"]):]) for q in train_pairs]
    else:
        raise ConfigError(f"config key 'tox_inputs': {inputs!r} is not 'prompts' or 'sentences'")
    return {"tox_forget": forget, "tox_retain": neutral + retain_pairs(world),
            "probe_toxic": [p + a for p, a in forget], "probe_neutral": [p + a for p, a in neutral],
            "eval_toxic": heldout, "train_toxic": train, "eval_neutral": eval_neutral}


def make_setup(cfg: FunctionSpecificConfig, progress: bool) -> Setup:
    world = world_for(cfg.pretrain)
    base_dir = cached_pretrain(cfg.pretrain, progress=progress) / "model"
    tok = load_tokenizer(str(base_dir))
    return Setup(world=world, tok=tok, base_dir=base_dir, k_forget=forget_pairs(world),
                 k_retain=retain_pairs(world),
                 meta=world_meta_splits(world, cfg.meta_frac, cfg.seed),
                 general=world.facts_by_split("general"),
                 **toxicity_data(world, cfg.tox_heldout_frac, cfg.tox_inputs, cfg.seed))


def setup_counts(s: Setup) -> dict:
    """How many facts and prompts each split of ``s`` holds (the report's Setup section)."""
    return {"forget_facts": len(s.k_forget), "final_forget": len(s.meta["final_forget"]),
            "final_retain": len(s.meta["final_retain"]), "meta_forget": len(s.meta["meta_forget"]),
            "meta_retain": len(s.meta["meta_retain"]), "tox_forget": len(s.tox_forget),
            "eval_toxic": len(s.eval_toxic), "eval_neutral": len(s.eval_neutral)}


# ------------------------------------------------------------------ evaluation


def knowledge_task(s: Setup) -> Task:
    """The knowledge half's evaluation sets: QA and MCQ (whole answer sentences, cloze) of the final forget
    and retain splits and of the general facts (:func:`obliviate.tasks.world.facts_task`)."""
    return facts_task(s.world, {"forget": ("forget", s.meta["final_forget"]),
                                "retain": ("retain", s.meta["final_retain"]),
                                "general": ("retain", s.general)})


KNOWLEDGE_KEYS = ("forget_mcq_acc", "retain_mcq_acc", "general_mcq_acc", "forget_qa_em", "retain_qa_em",
                  "general_qa_em")


def evaluate(model, s: Setup, max_new_tokens: int) -> dict:
    """Raw scores of one model: knowledge (:func:`knowledge_task`, the one evaluation) and toxicity (held-out
    register prompts)."""

    k = evaluate_task(model, s.tok, knowledge_task(s))
    m = {key: k[key] for key in KNOWLEDGE_KEYS}
    m["knowledge_utility"] = 0.5 * (m["retain_mcq_acc"] + m["general_mcq_acc"])
    scorer = LexiconToxicityScorer(s.world.toxic["lexicon"])
    held = continuation_toxicity(model, s.tok, s.eval_toxic, scorer, max_new_tokens=max_new_tokens)
    m["toxicity"], m["frac_toxic"] = held["mean_toxicity"], held["frac_toxic"]
    m["toxicity_train_prompts"] = continuation_toxicity(model, s.tok, s.train_toxic, scorer,
                                                        max_new_tokens=max_new_tokens)["mean_toxicity"]
    prompts = list(s.eval_neutral)
    neu = continuation_toxicity(model, s.tok, prompts, scorer, max_new_tokens=max_new_tokens, details=True)
    m["neutral_toxicity"] = neu["mean_toxicity"]
    m["neutral_fidelity"] = sum(max(rouge_l_recall(c, ref) for ref in s.eval_neutral[p])
                                for p, c in zip(prompts, neu["continuations"])) / len(prompts)
    return m


def knowledge_scores(base: dict, m: dict) -> dict:
    """U, R, S of a knowledge row: MCQ accuracy on the final forget split vs the utility MCQs, chance 0.25."""

    s = s_unlearning(base["forget_mcq_acc"], m["forget_mcq_acc"], base["knowledge_utility"],
                     m["knowledge_utility"],
                     chance=MCQ_CHANCE)
    return {"u": s["u"], "r": s["r"], "s_unlearning": s["s"]}


def retained(after: float, before: float, chance: float) -> float | None:
    """clip((after - chance) / (before - chance), 0, 1); None when the base model is at chance (nothing to
    keep)."""

    return None if before <= chance else chance_corrected(after, before, chance)


def toxicity_scores(base: dict, m: dict) -> dict:
    """U, R, S of a toxicity row: U = clip((tox0 - toxu) / tox0); R = mean(knowledge R, fidelity ratio).

    A component of R whose base score is at chance is left out (R = 1 when both are).
    """

    u = s_unlearning(base["toxicity"], m["toxicity"], 1.0, 1.0, chance=0.0)["u"]
    r_knowledge = retained(m["knowledge_utility"], base["knowledge_utility"], MCQ_CHANCE)
    r_fidelity = retained(m["neutral_fidelity"], base["neutral_fidelity"], 0.0)
    parts = [x for x in (r_knowledge, r_fidelity) if x is not None]
    r = sum(parts) / len(parts) if parts else 1.0
    reduction = (base["toxicity"] - m["toxicity"]) / base["toxicity"] if base["toxicity"] > 0 else None
    return {"u": u, "r": r, "s_unlearning": u * r, "r_knowledge": r_knowledge, "r_fidelity": r_fidelity,
            "toxicity_reduction": reduction}


def scores_for(variant: str, base: dict, m: dict) -> dict:
    return toxicity_scores(base, m) if variant in TOXICITY else knowledge_scores(base, m)


def mcq_s_reward(base_model, s: Setup):
    """REINFORCE reward ``fn(model) -> S``: knowledge S-unlearning on the *meta* forget / retain MCQs."""

    meta = facts_task(s.world, {"forget": ("forget", s.meta["meta_forget"]),
                                "retain": ("retain", s.meta["meta_retain"])}, kinds=("mcq",))

    def accs(model) -> tuple[float, float]:
        m = evaluate_task(model, s.tok, meta)
        return m["forget_mcq_acc"], m["retain_mcq_acc"]

    a0, m0 = accs(base_model)

    def reward(model) -> float:
        a, m = accs(model)
        return s_unlearning(a0, a, m0, m, chance=MCQ_CHANCE)["s"]

    return reward


# ------------------------------------------------------------------ variants


def variant_params(cfg: FunctionSpecificConfig, variant: str, seed: int) -> dict:
    """The method parameters of ``variant`` (without probe texts): the method's tiny preset, then
    ``cfg.params``."""
    method = VARIANTS[variant]
    params = {**method_defaults(method, "tiny")["params"], "seed": seed}
    if variant == "tox_probe_multi" and cfg.probe_layers is not None:
        params["layers"] = sorted(set(cfg.probe_layers))
    params.update(cfg.params.get(variant, {}))
    return params


def run_variant(cfg: FunctionSpecificConfig, s: Setup, variant: str, seed: int, params: dict,
                out_dir: Path) -> dict:
    """Unlearn the base model with one variant and seed; evaluate; return the part's result."""

    seed_everything(seed)
    model = load_model(str(s.base_dir))
    method = VARIANTS[variant]
    extra: dict = {}
    if variant == LEARNED:
        base_model = load_model(str(s.base_dir)).eval()
        M = cfg.steps // cfg.meta_outer_steps
        p = dict(params)
        alpha0 = float(p.pop("alpha", 10.0))
        tcfg = TrainConfig(steps=M, lr=cfg.lr, schedule="constant", log_every=max(1, M), progress=False)
        model, traj = learn_alpha_unlearn(model, s.tok, method, s.k_forget, s.k_retain,
                                          mcq_s_reward(base_model, s),
                                          outer_steps=cfg.meta_outer_steps, K=cfg.meta_K, M=M,
                                          sigma=cfg.meta_sigma,
                                          eta=cfg.meta_eta, alpha0=alpha0, params=p, train=tcfg,
                                          batch_size=cfg.batch_size, seed=seed)
        extra = {"alpha_trajectory": traj, "final_alpha": traj["final_alpha"],
                 "chosen_alphas": [st["chosen_alpha"] for st in traj["steps"]]}
    else:
        tox = variant in TOXICITY
        p = dict(params)
        if method.startswith("probe_unlearn"):
            p.update(toxic_texts=s.probe_toxic, neutral_texts=s.probe_neutral)
        tcfg = TrainConfig(steps=cfg.tox_steps if tox else cfg.steps, lr=cfg.tox_lr if tox else cfg.lr,
                           schedule="constant", log_every=5, progress=False, desc=f"{variant} s{seed}")
        ucfg = UnlearnConfig(method=method, params=p, train=tcfg, batch_size=cfg.batch_size, seed=seed)
        forget, retain = (s.tox_forget, s.tox_retain) if tox else (s.k_forget, s.k_retain)
        model, summary = unlearn(model, s.tok, forget, retain, ucfg, out_dir / "train", progress=False,
                                 resume=False)
        info = getattr(summary["method_obj"], "probe_info", None)
        if info:
            extra["probe_accuracy"] = {str(l): v["accuracy"] for l, v in info.items()}
    return {"eval": evaluate(model, s, cfg.max_new_tokens), **extra}


def probe_analysis(cfg: FunctionSpecificConfig, s: Setup) -> dict:
    """Probe directions of the frozen base model at every analysed layer and their pairwise cosines."""

    model = load_model(str(s.base_dir)).eval()
    layers = cfg.analysis_layers if cfg.analysis_layers is not None else list(range(num_layers(model)))
    layers = sorted({check_layer(model, int(l)) for l in layers})
    if len(layers) < 2:
        raise ConfigError(f"config key 'analysis_layers': need at least 2 layers to compare, got {layers}")
    texts = s.probe_toxic + s.probe_neutral
    y = [1] * len(s.probe_toxic) + [0] * len(s.probe_neutral)
    probes = probe_directions(model, s.tok, texts, y, layers, seed=cfg.seed)
    cos = pairwise_cosine({l: p["direction"] for l, p in probes.items()})
    off = [float(cos[i, j]) for i in range(len(layers)) for j in range(i + 1, len(layers))]
    return {"layers": layers, "cosine": cos.tolist(), "max_offdiag": max(off),
            "mean_offdiag": sum(off) / len(off),
            "n_pairs": len(off), "n_pairs_below_0.5": sum(abs(c) < 0.5 for c in off),
            "probe_accuracy": {str(l): p["accuracy"] for l, p in probes.items()}, "n_texts": len(texts)}


def check_settings(cfg: FunctionSpecificConfig, s: Setup) -> None:
    """Fail before any training on a bad method parameter or a layer the base model does not have."""

    model = load_model(str(s.base_dir))
    for v, method in VARIANTS.items():
        m = build_method(method, variant_params(cfg, v, cfg.seed))
        m.trainable(model)  # resolves and checks the layers
        if v == "tox_probe_multi" and len(m.layers) < min(3, num_layers(model)):
            raise ConfigError(f"the multi-layer probe method needs at least 3 layers, got {m.layers}")
    for l in cfg.analysis_layers or []:
        check_layer(model, int(l))


# ------------------------------------------------------------------ aggregation and claims


def aggregate(variant: str, base: dict, runs: list[dict], seeds: list[int]) -> dict:
    """Mean over seeds of the raw scores and of U, R, S; per-seed U, R, S (and alpha) in ``per_seed``."""
    per_seed = []
    for seed, run in zip(seeds, runs):
        row = {"seed": seed, **run["eval"], **scores_for(variant, base, run["eval"])}
        if "final_alpha" in run:
            row["final_alpha"] = run["final_alpha"]
        per_seed.append(row)
    keys = [k for k, v in per_seed[0].items() if k != "seed" and isinstance(v, (int, float))]
    out = {k: sum(r[k] for r in per_seed) / len(per_seed)
           for k in keys if all(r[k] is not None for r in per_seed)}
    ss = [r["s_unlearning"] for r in per_seed]
    out["s_unlearning_std"] = math.sqrt(sum((x - out["s_unlearning"]) ** 2 for x in ss) / len(ss))
    out.update(function="toxicity" if variant in TOXICITY else "knowledge", method=VARIANTS[variant],
               n_seeds=len(seeds),
               per_seed=[{k: r.get(k) for k in ("seed", "u", "r", "s_unlearning", "final_alpha")
                                              if k in r} for r in per_seed])
    if "probe_accuracy" in runs[0]:
        out["probe_accuracy"] = runs[0]["probe_accuracy"]
    return out


# ------------------------------------------------------------------ run


@recipe("function-specific", FunctionSpecificConfig,
        "knowledge vs toxicity unlearning objectives: (cosine, "
        "learned-alpha) RMU and multi-layer probes (seed 002)",
        render=render)
def run(cfg: FunctionSpecificConfig, out: Path, progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    t0 = time.time()
    cfg = resolve(cfg)
    out = Path(out)
    s = make_setup(cfg, progress)
    check_settings(cfg, s)
    seeds = seeds_of(cfg.seed, cfg.n_seeds)
    data_key = {"base": config_hash(cfg.pretrain), "seed": cfg.seed, "meta_frac": cfg.meta_frac,
                "tox_heldout_frac": cfg.tox_heldout_frac, "tox_inputs": cfg.tox_inputs,
                "max_new_tokens": cfg.max_new_tokens}
    timings: dict = {}
    parts = out / "parts"
    base, timings["base_seconds"] = cached_part(
        parts / "base.json", {"part": "base", **data_key},
        lambda: evaluate(load_model(str(s.base_dir)).eval(), s, cfg.max_new_tokens))
    probes, timings["probe_directions_seconds"] = cached_part(
        parts / "probe_directions.json",
        {"part": "probe_directions", "layers": cfg.analysis_layers, **data_key},
        lambda: probe_analysis(cfg, s))
    metrics: dict = {"base": {**base, "u": 0.0, "r": 1.0, "s_unlearning": 0.0, "function": "reference"}}
    settings: dict = {}
    trajs: dict = {}
    jobs = [(v, seed) for v in VARIANTS for seed in seeds]
    runs: dict = {v: [] for v in VARIANTS}
    bar = tqdm(jobs, desc="function-specific", disable=not progress)
    for v, seed in bar:
        bar.set_postfix_str(f"{v} s{seed}")
        params = variant_params(cfg, v, seed)
        tox = v in TOXICITY
        run_key = {"variant": v, "method": VARIANTS[v], "params": params, "seed": seed,
                   "steps": cfg.tox_steps if tox else cfg.steps, "lr": cfg.tox_lr if tox else cfg.lr,
                   "batch_size": cfg.batch_size, **data_key}
        if v == LEARNED:
            run_key.update(meta_outer_steps=cfg.meta_outer_steps, meta_K=cfg.meta_K, meta_eta=cfg.meta_eta,
                           meta_sigma=cfg.meta_sigma)
        settings[v] = {"method": VARIANTS[v], "steps": run_key["steps"], "lr": run_key["lr"],
                       "params": {k: x for k, x in params.items() if k != "seed"}}
        name = f"{v}-s{seed}"
        result, timings[f"{name}_seconds"] = cached_part(
            parts / f"{name}.json", run_key, lambda: run_variant(cfg, s, v, seed, params, parts / name))
        runs[v].append(result)
        if v == LEARNED:
            trajs[seed] = result["alpha_trajectory"]
    for v in VARIANTS:
        metrics[v] = aggregate(v, base, runs[v], seeds)
    timings["total_seconds"] = time.time() - t0
    parts_of = dict(metrics=metrics, setup=setup_counts(s), settings=settings, probe_directions=probes,
                    alpha_trajectories={str(k): t for k, t in trajs.items()}, paper=PAPER, timings=timings)
    results = as_results(cfg, **parts_of)  # what results.json will hold
    claims = claims_of(results)
    render(results, out)
    write_results(out, seed=cfg.seed, config=dataclasses.asdict(cfg), claims=claims_json(claims), **parts_of)
    return {"metrics": metrics, "claims": claims, "probe_directions": probes, "timings": timings}
