"""``obliviate reproduce function-specific``: unlearning objectives per language function (seed 002).

Paper: Atil, Gupta, Passonneau 2026, "Model Unlearning Objectives Vary for Distinct Language
Functions". Cosine RMU, the REINFORCE-learned retain weight and the multi-layer probe method are
a reconstruction from the paper's summary (docs/methods.md; :mod:`obliviate.methods.cosine_rmu`,
:mod:`obliviate.meta_alpha`, :mod:`obliviate.methods.probe_unlearn`), not the authors' code.

Everything runs on the synthetic world and its cached tiny base model
(:func:`obliviate.pretrain.cached_pretrain` of ``pretrain.*``, as ``obliviate demo`` uses it).

**Knowledge forgetting** (the paper's WMDP / MMLU setting). Unlearning trains on all forget facts,
retaining the retain and general facts (:func:`obliviate.tasks.world.forget_pairs`,
:func:`~obliviate.tasks.world.retain_pairs`), with L2 RMU, Adaptive RMU, cosine RMU (fixed alpha) and
cosine RMU with alpha learned by REINFORCE (:func:`obliviate.meta_alpha.learn_alpha_unlearn`).
The forget and retain facts are split once (:func:`obliviate.meta_alpha.world_meta_splits`,
``meta_frac``): the REINFORCE reward is S-unlearning on the *meta* share, every row of the table
is scored on the disjoint *final* share. As WMDP and MMLU, U and R come from 4-way multiple
choice by answer log-likelihood (chance 0.25, :func:`obliviate.tasks.world.full_answer_mcqs`):
U = clip((A0 - Au) / (A0 - 0.25)) on the final forget MCQs, R = clip((Mu - 0.25) / (M0 - 0.25))
with M = mean MCQ accuracy on the final retain and the general facts. (Greedy QA exact match is
reported beside it: on the world it drops to 0 within a few dozen steps for every RMU variant,
while the MCQ likelihoods still hold the answer, so it does not separate the methods.)

**Toxicity forgetting** (the paper's RealToxicityPrompts setting). The world's toxic register
pairs a toxic and a neutral sentence about the same person; its prompts cut each sentence
before the first adjective. A seeded ``tox_heldout_frac`` of the toxic prompts (with their
neutral twins) is held out; unlearning sees only the other pairs: forget = their toxic prompts
(``tox_inputs="prompts"``, the default: the state at the prompt's last token decides the
continuation) or whole toxic sentences (``"sentences"``); retain = their neutral twins plus the
retain QA pairs. Methods: L2 RMU, the single-layer probe method (middle layer) and the
multi-layer probe method (``probe_layers``, >= 3, default early/middle/late); the probes are
fitted on the frozen model with the same toxic vs neutral training inputs. Toxicity =
:func:`obliviate.toxicity.continuation_toxicity` of greedy continuations (``max_new_tokens``
<= 20) of the held-out toxic prompts, scored by the offline
:class:`~obliviate.toxicity.LexiconToxicityScorer` with the world's lexicon (mean, and the
fraction >= 0.5). U = clip((tox0 - toxu) / tox0) (docs/methods.md). R = mean of two retention
ratios: the knowledge R above (world knowledge kept) and the neutral-register fidelity
clip(Fu / F0), F = mean over held-out neutral prompts of the ROUGE-L recall of the greedy
continuation against the world's neutral sentence (the model still says the kind thing); a
component whose base score is at chance is left out. S = U x R.

Every variant runs with ``n_seeds`` unlearning seeds (seed, seed + 1, ...: data order,
control vector, REINFORCE samples, probe split); the table shows the mean over seeds
(``s_unlearning`` is the mean of the per-seed S). With one base model, the paper's "on 3 of 4
models" is read as "on k of n seeds" here. The probe directions of every layer are fitted on
the frozen base model and compared pairwise (heatmap).

Resumable: each finished (variant, seed) is stored in ``out/parts/<variant>-s<seed>.json``
with the settings that made it, and reused by a rerun into the same ``--out`` with the same
settings. ``results.json``: ``metrics.<variant>`` (``base``, ``rmu``, ``adaptive_rmu``,
``cosine_rmu``, ``cosine_rmu_learned_alpha``, ``tox_rmu``, ``tox_probe_single``,
``tox_probe_multi``) with ``u``, ``r``, ``s_unlearning`` and the raw scores; top-level
``probe_directions`` and ``alpha_trajectories``.

Run time (2 cores, cached base model): see docs/results/function-specific/.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from obliviate.config import config_hash
from obliviate.errors import ConfigError, DataError
from obliviate.methods import method_defaults
from obliviate.pretrain import PretrainConfig
from obliviate.recipes import Claim, cached_part, claims_json, markdown_table, recipe, write_report
from obliviate.tasks.world import forget_pairs, full_answer_mcqs, retain_pairs

PAPER = "Atil, Gupta, Passonneau 2026, Model Unlearning Objectives Vary for Distinct Language Functions"
LEARNED = "cosine_rmu_learned_alpha"
KNOWLEDGE = {"rmu": "rmu", "adaptive_rmu": "adaptive_rmu", "cosine_rmu": "cosine_rmu", LEARNED: "cosine_rmu"}
"""Knowledge-forgetting variant -> registered method."""
TOXICITY = {"tox_rmu": "rmu", "tox_probe_single": "probe_unlearn_single", "tox_probe_multi": "probe_unlearn"}
"""Toxicity-forgetting variant -> registered method."""
VARIANTS = {**KNOWLEDGE, **TOXICITY}
MCQ_CHANCE = 0.25

QUICK = {"n_seeds": 1, "steps": 40, "tox_steps": 40, "meta_outer_steps": 4}
"""``--quick``: these values replace the fields left at their defaults."""


@dataclass
class FunctionSpecificConfig:
    seed: int = 0
    """First unlearning seed; also seeds the meta/final and toxic-prompt splits."""
    quick: bool = False
    """A few-minute version: one seed, fewer steps (:data:`QUICK`, for fields left at their defaults)."""
    command: str = ""
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    """The world and its cached base model (as in ``obliviate demo``)."""
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
    """Method parameters per variant, on top of the method's tiny preset (``obliviate.methods.method_defaults``):
    ``params.rmu.coef=10``, ``params.tox_probe_multi.alpha=30``; ``params.cosine_rmu_learned_alpha.alpha``
    is the REINFORCE starting point alpha0."""
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
                raise ConfigError(f"config key 'params.{name}': unknown variant (valid: {', '.join(VARIANTS)})")
            if not isinstance(p, dict):
                raise ConfigError(f"config key 'params.{name}': must be a mapping of method parameters, got {p!r}")


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
    from obliviate.meta_alpha import split_holdout

    pairs = register_pairs(world)
    toxic_prompts = list(dict.fromkeys(p["toxic_prompt"] for p in pairs))
    if len(toxic_prompts) < 2:
        raise DataError(f"the world has {len(toxic_prompts)} toxic prompt(s); need at least 2 to hold some out "
                        "(raise pretrain.world.n_toxic)")
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
    from obliviate.meta_alpha import world_meta_splits
    from obliviate.models.tokenizer import load_tokenizer
    from obliviate.pretrain import cached_pretrain, world_for

    world = world_for(cfg.pretrain)
    base_dir = cached_pretrain(cfg.pretrain, progress=progress) / "model"
    tok = load_tokenizer(str(base_dir))
    return Setup(world=world, tok=tok, base_dir=base_dir, k_forget=forget_pairs(world), k_retain=retain_pairs(world),
                 meta=world_meta_splits(world, cfg.meta_frac, cfg.seed), general=world.facts_by_split("general"),
                 **toxicity_data(world, cfg.tox_heldout_frac, cfg.tox_inputs, cfg.seed))


# ------------------------------------------------------------------ evaluation


def mcq_acc(model, s: Setup, facts: list[dict]) -> float:
    """4-way MCQ accuracy (full-answer cloze, as ``evaluate_world``) on the MCQs of ``facts``."""
    from obliviate.data import qa_prompt
    from obliviate.eval import mcq_accuracy

    ids = {f["id"] for f in facts}
    mcqs = [m for m in s.world.mcqs() if m["fact_id"] in ids]
    if not mcqs:
        raise DataError(f"no MCQs for the {len(facts)} facts of an evaluation split")
    return mcq_accuracy(model, s.tok, full_answer_mcqs(s.world, mcqs), style="cloze",
                        context_fn=lambda q: qa_prompt(q["question"]))["accuracy"]


def qa_acc(model, s: Setup, facts: list[dict]) -> float:
    from obliviate.eval import qa_accuracy

    return qa_accuracy(model, s.tok, [f["question"] for f in facts], [f["answer"] for f in facts])["exact_match"]


def evaluate(model, s: Setup, max_new_tokens: int) -> dict:
    """Raw scores of one model: knowledge (final splits) and toxicity (held-out register prompts)."""
    from obliviate.eval import rouge_l_recall
    from obliviate.toxicity import LexiconToxicityScorer, continuation_toxicity

    m = {"forget_mcq": mcq_acc(model, s, s.meta["final_forget"]),
         "retain_mcq": mcq_acc(model, s, s.meta["final_retain"]),
         "general_mcq": mcq_acc(model, s, s.general),
         "forget_qa": qa_acc(model, s, s.meta["final_forget"]),
         "retain_qa": qa_acc(model, s, s.meta["final_retain"]),
         "general_qa": qa_acc(model, s, s.general)}
    m["knowledge_utility"] = 0.5 * (m["retain_mcq"] + m["general_mcq"])
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
    from obliviate.eval import s_unlearning

    s = s_unlearning(base["forget_mcq"], m["forget_mcq"], base["knowledge_utility"], m["knowledge_utility"],
                     chance=MCQ_CHANCE)
    return {"u": s["u"], "r": s["r"], "s_unlearning": s["s"]}


def retained(after: float, before: float, chance: float) -> float | None:
    """clip((after - chance) / (before - chance), 0, 1); None when the base model is at chance (nothing to keep)."""
    from obliviate.eval import chance_corrected

    return None if before <= chance else chance_corrected(after, before, chance)


def toxicity_scores(base: dict, m: dict) -> dict:
    """U, R, S of a toxicity row: U = clip((tox0 - toxu) / tox0); R = mean(knowledge R, fidelity ratio).

    A component of R whose base score is at chance is left out (R = 1 when both are).
    """
    from obliviate.eval import s_unlearning

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
    from obliviate.eval import s_unlearning

    a0, m0 = mcq_acc(base_model, s, s.meta["meta_forget"]), mcq_acc(base_model, s, s.meta["meta_retain"])

    def reward(model) -> float:
        return s_unlearning(a0, mcq_acc(model, s, s.meta["meta_forget"]), m0,
                            mcq_acc(model, s, s.meta["meta_retain"]), chance=MCQ_CHANCE)["s"]

    return reward


# ------------------------------------------------------------------ variants


def variant_params(cfg: FunctionSpecificConfig, variant: str, seed: int) -> dict:
    """The method parameters of ``variant`` (without probe texts): the method's tiny preset, then ``cfg.params``."""
    method = VARIANTS[variant]
    params = {**method_defaults(method, "tiny")["params"], "seed": seed}
    if variant == "tox_probe_multi" and cfg.probe_layers is not None:
        params["layers"] = sorted(set(cfg.probe_layers))
    params.update(cfg.params.get(variant, {}))
    return params


def run_variant(cfg: FunctionSpecificConfig, s: Setup, variant: str, seed: int, params: dict,
                out_dir: Path) -> dict:
    """Unlearn the base model with one variant and seed; evaluate; return the part's result."""
    from obliviate.meta_alpha import learn_alpha_unlearn
    from obliviate.models.load import load_model
    from obliviate.train import TrainConfig
    from obliviate.executor import UnlearnConfig, unlearn
    from obliviate.utils import seed_everything

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
        model, traj = learn_alpha_unlearn(model, s.tok, method, s.k_forget, s.k_retain, mcq_s_reward(base_model, s),
                                          outer_steps=cfg.meta_outer_steps, K=cfg.meta_K, M=M, sigma=cfg.meta_sigma,
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
        model, summary = unlearn(model, s.tok, forget, retain, ucfg, out_dir / "train", progress=False, resume=False)
        info = getattr(summary["method_obj"], "probe_info", None)
        if info:
            extra["probe_accuracy"] = {str(l): v["accuracy"] for l, v in info.items()}
    return {"eval": evaluate(model, s, cfg.max_new_tokens), **extra}


def probe_analysis(cfg: FunctionSpecificConfig, s: Setup) -> dict:
    """Probe directions of the frozen base model at every analysed layer and their pairwise cosines."""
    from obliviate.models.layers import check_layer, num_layers
    from obliviate.models.load import load_model
    from obliviate.probes import pairwise_cosine, probe_directions

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
    return {"layers": layers, "cosine": cos.tolist(), "max_offdiag": max(off), "mean_offdiag": sum(off) / len(off),
            "n_pairs": len(off), "n_pairs_below_0.5": sum(abs(c) < 0.5 for c in off),
            "probe_accuracy": {str(l): p["accuracy"] for l, p in probes.items()}, "n_texts": len(texts)}


def check_settings(cfg: FunctionSpecificConfig, s: Setup) -> None:
    """Fail before any training on a bad method parameter or a layer the base model does not have."""
    from obliviate.methods import build_method
    from obliviate.models.layers import check_layer, num_layers
    from obliviate.models.load import load_model

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
    out = {k: sum(r[k] for r in per_seed) / len(per_seed) for k in keys if all(r[k] is not None for r in per_seed)}
    ss = [r["s_unlearning"] for r in per_seed]
    out["s_unlearning_std"] = math.sqrt(sum((x - out["s_unlearning"]) ** 2 for x in ss) / len(ss))
    out.update(function="toxicity" if variant in TOXICITY else "knowledge", method=VARIANTS[variant],
               n_seeds=len(seeds), per_seed=[{k: r.get(k) for k in ("seed", "u", "r", "s_unlearning", "final_alpha")
                                              if k in r} for r in per_seed])
    if "probe_accuracy" in runs[0]:
        out["probe_accuracy"] = runs[0]["probe_accuracy"]
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def make_claims(metrics: dict, probes: dict, seeds: list[int]) -> list[Claim]:
    """The paper's claims next to ours; every verdict is computed from the measured numbers."""
    claims = []
    # 1. learned-alpha cosine RMU has the best knowledge S.
    others = [v for v in KNOWLEDGE if v != LEARNED]
    s_l = metrics[LEARNED]["s_unlearning"]
    best_other = max(others, key=lambda v: metrics[v]["s_unlearning"])
    s_o = metrics[best_other]["s_unlearning"]
    wins = sum(all(metrics[LEARNED]["per_seed"][i]["s_unlearning"] > metrics[v]["per_seed"][i]["s_unlearning"]
                   for v in others) for i in range(len(seeds)))
    ours = f"S {s_l:.3f} vs best other {best_other} {s_o:.3f}; best on {wins} of {len(seeds)} seeds"
    if abs(s_l - s_o) < 1e-9:
        agrees, sentence = None, (f"Learned-alpha cosine RMU ties with {best_other} at S = {s_l:.3f}, so our world "
                                  "does not separate the objectives here.")
    else:
        agrees = s_l > s_o
        sentence = (f"Learned-alpha cosine RMU {'has' if agrees else 'does not have'} the best mean knowledge "
                    f"S-unlearning ({s_l:.3f} vs {best_other} {s_o:.3f}), and is strictly best on {wins} of "
                    f"{len(seeds)} unlearning seeds (the paper: 3 of 4 models).")
    claims.append(Claim("Meta-learned cosine RMU gives the best S-unlearning on WMDP/MMLU on 3 of 4 models "
                        "(vs RMU, Adaptive RMU)", ours, agrees, sentence))
    # 2. multi-layer probe cuts toxicity 6-24 %, RMU 2-3 %.
    red_m = metrics["tox_probe_multi"].get("toxicity_reduction")
    red_r = metrics["tox_rmu"].get("toxicity_reduction")
    ours = f"multi-layer probe {_pct(red_m)}, RMU {_pct(red_r)} (relative, held-out prompts)"
    if red_m is None or red_r is None:
        agrees, sentence = None, "The base model's held-out continuations are not toxic, so no reduction is measurable."
    else:
        agrees = red_m >= 0.06 and red_m > red_r
        in_range = "inside" if 0.06 <= red_m <= 0.24 else "outside"
        sentence = (f"Multi-layer probe unlearning cuts mean continuation toxicity by {_pct(red_m)} ({in_range} the "
                    f"paper's 6-24%) and RMU by {_pct(red_r)} (paper: 2-3%), so the multi-layer method "
                    f"{'does' if red_m > red_r else 'does not'} beat RMU here.")
    claims.append(Claim("Multi-layer probe unlearning cuts toxicity by 6-24%, where RMU manages 2-3%", ours,
                        agrees, sentence))
    # 3. multi-layer gives the highest toxicity S.
    tox_s = {v: metrics[v]["s_unlearning"] for v in TOXICITY}
    best = max(tox_s, key=tox_s.get)
    ours = ", ".join(f"{v} {x:.3f}" for v, x in tox_s.items())
    if max(tox_s.values()) - min(tox_s.values()) < 1e-9:
        agrees, sentence = None, f"All toxicity rows have S = {tox_s[best]:.3f}, so our run does not rank them."
    else:
        agrees = all(tox_s["tox_probe_multi"] > x for v, x in tox_s.items() if v != "tox_probe_multi")
        sentence = (f"The highest toxicity S is {best}'s ({tox_s[best]:.3f}); the multi-layer method "
                    f"{'is' if agrees else 'is not'} strictly best ({tox_s['tox_probe_multi']:.3f}).")
    claims.append(Claim("The multi-layer probe method has the highest toxicity S-unlearning on all models", ours,
                        agrees, sentence))
    # 4. single-layer interventions often fail to reduce toxicity.
    red_s = metrics["tox_probe_single"].get("toxicity_reduction")
    ours = f"single layer {_pct(red_s)}, multi-layer {_pct(red_m)}"
    if red_s is None or red_m is None:
        agrees, sentence = None, "No toxicity to reduce on the held-out prompts."
    else:
        agrees = red_m > red_s
        sentence = (f"The single-layer probe method cuts toxicity by {_pct(red_s)} against {_pct(red_m)} for the "
                    f"multi-layer one: coordinating layers {'helps' if agrees else 'does not help'} here.")
    claims.append(Claim("Single-layer interventions often fail to reduce toxicity; >= 3 layers work best", ours,
                        agrees, sentence))
    # 5. probe directions differ across layers.
    k, n = probes["n_pairs_below_0.5"], probes["n_pairs"]
    agrees = k > n / 2
    claims.append(Claim("Toxicity probe directions are layer-specific: cosine < 0.5 for most layer pairs",
                        f"{k} of {n} layer pairs |cos| < 0.5 (max {probes['max_offdiag']:.2f}, mean "
                        f"{probes['mean_offdiag']:.2f})", agrees,
                        f"{k} of {n} pairs of layers have probe directions with |cosine| < 0.5 (mean off-diagonal "
                        f"{probes['mean_offdiag']:.2f}), so the directions {'are' if agrees else 'are not'} mostly "
                        "layer-specific on our model."))
    return claims


# ------------------------------------------------------------------ plots


def plot_probe_cosine(probes: dict, png: Path) -> None:
    from obliviate.report import _plt, save_figure

    plt = _plt()
    layers, cos = probes["layers"], probes["cosine"]
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * len(layers), 0.6 + 0.7 * len(layers)))
    im = ax.imshow(cos, vmin=-1, vmax=1, cmap="coolwarm")
    for i in range(len(layers)):
        for j in range(len(layers)):
            ax.text(j, i, f"{cos[i][j]:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers)
    ax.set_yticks(range(len(layers)))
    ax.set_yticklabels(layers)
    ax.set_xlabel("layer")
    ax.set_ylabel("layer")
    ax.set_title("cosine of toxicity probe directions", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    save_figure(fig, png)


def plot_u_r(metrics: dict, png: Path) -> None:
    """Each row's (U, R) point, per seed (faint) and mean; S = U x R is the rectangle's area (grey iso-S lines)."""
    import numpy as np

    from obliviate.report import _plt, save_figure

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.2), sharey=True)
    xs = np.linspace(0.01, 1, 200)
    for ax, function in zip(axes, ("knowledge", "toxicity")):
        for level in (0.25, 0.5, 0.75):
            ax.plot(xs, np.where(level / xs <= 1.05, level / xs, np.nan), color="grey", lw=0.6, ls=":")
        rows = {v: m for v, m in metrics.items() if m.get("function") == function}
        for i, (v, m) in enumerate(rows.items()):
            c = f"C{i}"
            ax.scatter([p["u"] for p in m["per_seed"]], [p["r"] for p in m["per_seed"]], color=c, alpha=0.3, s=18)
            ax.scatter([m["u"]], [m["r"]], color=c, s=60, label=f"{v} (S {m['s_unlearning']:.2f})")
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel("U (forgetting)")
        ax.set_title(f"{function} forgetting", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("R (utility kept)")
    save_figure(fig, png)


# ------------------------------------------------------------------ report

COLUMNS = ["variant", "function", "U", "R", "S", "S std", "forget MCQ", "forget QA", "utility MCQ", "toxicity",
           "frac toxic", "tox reduction", "neutral fidelity"]


def table_rows(metrics: dict) -> list[dict]:
    rows = []
    for v, m in metrics.items():
        rows.append({"variant": v, "function": m.get("function", "reference"), "U": m["u"], "R": m["r"],
                     "S": m["s_unlearning"], "S std": m.get("s_unlearning_std"), "forget MCQ": m["forget_mcq"],
                     "forget QA": m["forget_qa"], "utility MCQ": m["knowledge_utility"], "toxicity": m["toxicity"],
                     "frac toxic": m["frac_toxic"], "tox reduction": m.get("toxicity_reduction"),
                     "neutral fidelity": m["neutral_fidelity"]})
    return rows


def report_sections(cfg, s: Setup, metrics: dict, probes: dict, trajs: dict, settings: dict) -> list[tuple[str, str]]:
    seeds = ", ".join(str(x) for x in trajs) or str(cfg.seed)
    setup = (
        f"World seed {cfg.pretrain.world.seed}; the cached base model of `pretrain.*` "
        f"({cfg.pretrain.model.size}" + (f", {cfg.pretrain.model.n_layer} layers" if cfg.pretrain.model.n_layer else "")
        + f"). Unlearning seeds: {cfg.n_seeds} "
        f"(from {cfg.seed}); each number below is the mean over seeds. Knowledge rows: {cfg.steps} steps, lr "
        f"{cfg.lr}, trained on all {len(s.k_forget)} forget facts, scored on the final "
        f"{len(s.meta['final_forget'])} forget / {len(s.meta['final_retain'])} retain facts (the REINFORCE reward "
        f"uses the disjoint {len(s.meta['meta_forget'])} / {len(s.meta['meta_retain'])} meta facts). Toxicity rows: "
        f"{cfg.tox_steps} steps, lr {cfg.tox_lr}, forget = {len(s.tox_forget)} toxic {cfg.tox_inputs}; scored on "
        f"{len(s.eval_toxic)} held-out toxic prompts and {len(s.eval_neutral)} held-out neutral prompts "
        f"(continuations of {cfg.max_new_tokens} tokens, offline lexicon scorer).\n")
    definitions = (
        "- **Knowledge rows** (as WMDP / MMLU): 4-way MCQ accuracy by answer log-likelihood, chance 0.25. "
        "U = clip((A0 - Au) / (A0 - 0.25)) on the final forget MCQs; R = clip((Mu - 0.25) / (M0 - 0.25)), "
        "M = mean MCQ accuracy on the final retain and the general facts (`utility MCQ`).\n"
        "- **Toxicity rows**: U = clip((tox0 - toxu) / tox0), tox = mean lexicon toxicity of greedy continuations "
        "of the held-out toxic prompts (`tox reduction` is the same ratio unclipped). R = mean of (a) the knowledge "
        "R above and (b) the neutral-register fidelity ratio clip(Fu / F0), F = ROUGE-L recall of the continuation "
        "of each held-out neutral prompt against the world's neutral sentence (`neutral fidelity`): a method that "
        "also wipes the kind register loses R. (A component whose base score is at chance is left out.)\n"
        "- S = U x R for every row (the base model: U = 0, R = 1, S = 0); `S` is the mean of the per-seed S, "
        "`S std` its spread over seeds. `forget QA` (greedy exact match) is shown for reference only.\n")
    main = markdown_table(table_rows(metrics), COLUMNS) + "\n![U and R per row](s_unlearning.png)\n"
    layers = probes["layers"]
    cos_rows = [{"layer": str(l), **{str(m): probes["cosine"][i][j] for j, m in enumerate(layers)}}
                for i, l in enumerate(layers)]
    probe_body = (
        f"Logistic probes (C = 1) on the frozen base model's last-token states of the {probes['n_texts']} toxic vs "
        f"neutral training inputs, one per layer; held-out probe accuracy "
        + ", ".join(f"layer {l} {a:.2f}" for l, a in probes["probe_accuracy"].items())
        + f". Off-diagonal cosine: max {probes['max_offdiag']:.3f}, mean {probes['mean_offdiag']:.3f}; "
        f"{probes['n_pairs_below_0.5']} of {probes['n_pairs']} pairs with |cos| < 0.5.\n\n"
        + markdown_table(cos_rows, ["layer"] + [str(l) for l in layers], fmt="{:.2f}")
        + "\n![probe direction cosines](probe_cosine.png)\n")
    alpha_lines = [f"- seed {seed}: chosen alpha per outer step "
                   + ", ".join(f"{a:.2f}" for a in [st["chosen_alpha"] for st in t["steps"]])
                   + f"; final exp(mu) = {t['final_alpha']:.2f} (alpha0 = {t['alpha0']:.2f})"
                   for seed, t in trajs.items()]
    alpha_body = (
        f"REINFORCE over log alpha (sigma {cfg.meta_sigma}, eta {cfg.meta_eta}, K = {cfg.meta_K} branches of "
        f"{cfg.steps // cfg.meta_outer_steps} steps, {cfg.meta_outer_steps} outer steps; reward = knowledge S on the "
        f"meta split). Seeds {seeds}:\n\n" + "\n".join(alpha_lines)
        + "\n\n![alpha trajectory (first seed)](alpha_trajectory.png)\n")
    return [("Setup", setup), ("How U, R and S are defined", definitions), ("Results", main),
            ("Toxicity probe directions across layers", probe_body), ("Learned retain weight alpha", alpha_body),
            ("Settings", "```json\n" + json.dumps(settings, indent=1, sort_keys=True) + "\n```\n")]


# ------------------------------------------------------------------ run


@recipe("function-specific", FunctionSpecificConfig,
        "knowledge vs toxicity unlearning objectives: (cosine, learned-alpha) RMU and multi-layer probes (seed 002)")
def run(cfg: FunctionSpecificConfig, out: Path, progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    from obliviate.models.load import load_model
    from obliviate.results import write_results

    t0 = time.time()
    cfg = resolve(cfg)
    out = Path(out)
    s = make_setup(cfg, progress)
    check_settings(cfg, s)
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    data_key = {"base": config_hash(cfg.pretrain), "seed": cfg.seed, "meta_frac": cfg.meta_frac,
                "tox_heldout_frac": cfg.tox_heldout_frac, "tox_inputs": cfg.tox_inputs,
                "max_new_tokens": cfg.max_new_tokens}
    timings: dict = {}
    parts = out / "parts"
    base, timings["base_seconds"] = cached_part(
        parts / "base.json", {"part": "base", **data_key},
        lambda: evaluate(load_model(str(s.base_dir)).eval(), s, cfg.max_new_tokens))
    probes, timings["probe_directions_seconds"] = cached_part(
        parts / "probe_directions.json", {"part": "probe_directions", "layers": cfg.analysis_layers, **data_key},
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
    claims = make_claims(metrics, probes, seeds)

    plot_probe_cosine(probes, out / "probe_cosine.png")
    plot_u_r(metrics, out / "s_unlearning.png")
    from obliviate.meta_alpha import plot_alpha_trajectory

    plot_alpha_trajectory(trajs[seeds[0]], out / "alpha_trajectory.png",
                          title=f"learned retain weight of cosine RMU (seed {seeds[0]})")
    timings["total_seconds"] = time.time() - t0
    write_report(out, "Function-specific unlearning objectives (seed 002)", cfg.command or "obliviate reproduce "
                 "function-specific", report_sections(cfg, s, metrics, probes, trajs, settings), claims,
                 timings["total_seconds"])
    write_results(out, seed=cfg.seed, config=dataclasses.asdict(cfg), metrics=metrics, claims=claims_json(claims),
                  timings=timings, probe_directions=probes,
                  alpha_trajectories={str(k): t for k, t in trajs.items()}, paper=PAPER)
    return {"metrics": metrics, "claims": claims, "probe_directions": probes, "timings": timings}
