"""``obliviate reproduce atwu``: learned token-level importance for unlearning (seed 001).

Paper: Yuce, Nikolaou, Flammarion 2026, "Learning What to Forget: Improving LLM Unlearning
via Learned Token-Level Importance". ATWU and its weighted objectives are a reconstruction
from the paper's summary (docs/methods.md, :mod:`obliviate.methods.atwu`), not the authors' code.

Two parts, each method's result stored when it finishes (``out/parts/<part>/<method>.json``),
so an interrupted run resumes into the same ``--out``:

1. **world**: the cached tiny base model of :class:`~obliviate.pretrain.PretrainConfig`
   (as :mod:`obliviate.recipes.compare` uses it) is unlearned on the forget facts with each method
   (defaults: each method's tiny preset, ``obliviate.methods.method_defaults``; overrides ``runs.<method>.*``).
   F = forget QA accuracy, R = mean of retain and general QA accuracy (the utility of
   S-unlearning); FQ, RD, UQ (:mod:`obliviate.eval.uq`) and S-unlearning. For the ATWU
   methods, the token AUROC of the learned scores (the final scorer, ``method.token_scores``;
   see below for which hidden states it reads) against the world's forget-specific answer tokens
   (:mod:`obliviate.eval.token_scores`); baselines uniform, probability (1 - p under the
   base model) and rarity (inverse frequency in the world's corpus).
2. **tofu**: the tiny-model TOFU protocol (:mod:`obliviate.tofu`, config ``tofu.*``, default
   :class:`~obliviate.tofu.TofuConfig`, so the base and retain-only models that ``obliviate
   tofu`` trained and cached are reused); each method unlearns ``forget10`` (overrides
   ``tofu_runs.<method>.*``); TOFU forget quality and model utility; F and R for
   FQ/RD/UQ are forget10 and retain ROUGE-L recall (``tofu_uq_from=prob``: TOFU probability).
   Without the TOFU files the part is skipped and the report says so.

``results.json``: ``metrics.<method>`` with ``uq``, ``fq``, ``rd``, ``s_unlearning`` and the
world QA accuracies; ``token_auroc`` for the ATWU methods; ``tofu_uq``, ``tofu_fq``, ``tofu_rd``,
``tofu_forget_quality``, ``tofu_model_utility``, ``tofu_forget10_rouge_l``, ``tofu_retain_rouge_l``
when the TOFU part ran. ``metrics.base`` (world and ``tofu_*`` of the fine-tuned TOFU model),
``metrics.tofu_retain_model``, ``metrics.token_baselines.<uniform|probability|rarity>.token_auroc``
and ``metrics.token_labels`` (how many specific / structural answer tokens).

Token AUROC and the one tuned setting. ATWU's scorer reads final-layer hidden states of the model
being unlearned, which unlearning itself scrambles on the forget answers (after 50 steps even the
probability heuristic computed on the unlearned model falls to AUROC ~0.2). ``token_auroc`` therefore
reads the learned scorer (final w, b) out on the *original* model's hidden states (the model the labels
and the probability baseline refer to; ``token_auroc_on=unlearned`` switches), and both readings are
reported (``token_auroc_base``, ``token_auroc_unlearned``). With docs/methods.md's defaults (w lr 1e-3,
one w-step, rho 0.3, tau 0.05, mu 10, beta 5, ``position="predict"``) the learned scores were not
reliably aligned with the true spans: world seed 0, run seeds 0/1/2, ATWU: 0.72/0.43/0.47 (unlearned
reading), 0.89/0.38/0.67 (original reading); world seed 1: 0.53/0.51/0.28 and 0.46/0.44/0.50. Neither
w_lr 3e-3 or 1e-2 (with 1 or 5 w-steps), tau 0 or 0.01, beta 1, exponent ``beta_z`` nor theta lr 3e-4
for 100 steps changed that on world seed 0 (all 0.36-0.72). The scorer reading the target token's *own*
hidden state (``position="token"``, :data:`SCORER_DEFAULTS`) did: world seed 0, run seeds 0-3: original
reading 0.76/0.97/0.91/0.91, unlearned 0.78/0.65/0.48/0.71; checked on world seed 1, run seeds 0-2:
0.92/0.92/0.86 and 0.79/0.72/0.39 (its own position carries the token's identity, e.g. an invented
name, while the predicting position carries the model's guess). The recipe uses it for every ATWU
method. With it, on world seed 0 (run seeds 0/1), ATWU-SimNPO's scores align too (original reading
0.65/0.92, unlearned 0.71/0.82) but ATWU-NPO's do not (at the recipe's lr 3e-4: original 0.36/0.28,
unlearned 0.47/0.77; lr 1e-3, run seed 0: 0.30 and 0.51): its scorer's w-step is SATGA+'s while theta
follows NPO.
On the world the heuristics are near-perfect (probability 0.998, rarity 1.0 on world seed 0): the
forget-specific tokens are invented names and values, rare in the corpus by construction.

Run time (2 cores, cached world and TOFU base models): see docs/recipes.md, section "atwu".
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from obliviate.config import config_hash, from_dict, to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.eval.tofu import TINY_SCALE_NOTE
from obliviate.pretrain import PretrainConfig
from obliviate.recipes import Claim, cached_part, claims_json, markdown_table, recipe, write_report
from obliviate.tasks.world import evaluate_world, forget_pairs, retain_pairs
from obliviate.tofu import TofuConfig

PAPER = "Yuce, Nikolaou, Flammarion 2026, Learning What to Forget (seed 001)"
METHODS = ["atwu", "graddiff", "npo", "simnpo", "wga", "atwu_npo", "atwu_simnpo"]
QUICK_METHODS = ["atwu", "graddiff", "npo", "atwu_npo"]
PAPER_UQ, PAPER_MARGIN = 91.7, 5.8
PARTS = ("world", "tofu")
RUN_DEFAULTS: dict[str, dict] = {"atwu_npo": {"lr": 3e-4}}
"""Recipe defaults under the user's ``runs`` / ``tofu_runs``: a weighted objective gets its base objective's
learning rate (its tiny preset, ``obliviate.methods.method_defaults``; ``atwu_simnpo`` already shares SimNPO's)."""
SCORER_DEFAULTS: dict = {"position": "token"}
"""Scorer settings of every ATWU method in this recipe (tuned on world seed 0; see the module docstring)."""
WORLD_SPLITS = ("forget", "retain", "general")
"""World QA splits evaluated: F is forget accuracy, R the mean of retain and general accuracy."""


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
    """World unlearning overrides per method: ``runs.atwu.lr=5e-4``, ``runs.atwu.params.w_lr=1e-2``."""
    tofu: TofuConfig = field(default_factory=TofuConfig)
    """The TOFU protocol's data, models and evaluation (keep the defaults to reuse ``obliviate tofu``'s cached
    base models); ``tofu.method`` and ``tofu.unlearn`` are unused (see ``tofu_runs``)."""
    tofu_runs: dict = field(default_factory=dict)
    """TOFU unlearning overrides per method: ``tofu_runs.atwu.steps=100``."""
    token_auroc_on: Literal["base", "unlearned"] = "base"
    """Whose hidden states the learned scorer (final w, b) reads for ``token_auroc``: the original model's (the
    labels and the probability baseline refer to it) or the unlearned model's; the other is reported as
    ``token_auroc_<other>``."""
    tofu_uq_from: Literal["rouge_l", "prob"] = "rouge_l"
    """F and R of TOFU's FQ/RD/UQ: forget10 / retain ROUGE-L recall of greedy answers, or TOFU probability."""
    near_utility: float = 0.1
    """"Utility kept near the original" means a relative utility drop of at most this much."""

    def __post_init__(self):
        from obliviate.methods import get_method

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
    from obliviate.config import deep_merge

    base = copy.deepcopy(RUN_DEFAULTS.get(name, {}))
    if is_scored(name):
        base = deep_merge(base, {"params": dict(SCORER_DEFAULTS)})
    return deep_merge(base, copy.deepcopy(getattr(cfg, which).get(name, {}) or {}))


def is_scored(name: str) -> bool:
    """Whether ``name`` is an ATWU method (it learns token scores)."""
    from obliviate.methods import get_method

    return hasattr(get_method(name), "token_scores")


def uq_metrics(f0: float, fu: float, r0: float, ru: float) -> dict:
    """{fq, rd, uq} (:func:`obliviate.eval.uq.unlearning_quality`); None where F0 or R0 is not positive."""
    from obliviate.eval.uq import unlearning_quality

    if f0 <= 0 or r0 <= 0:
        return {"fq": None, "rd": None, "uq": None}
    return unlearning_quality(f0, fu, r0, ru)


def check_runs(cfg: AtwuRecipeConfig, methods: list[str], parts: list[str]) -> None:
    """Every method's run settings and method parameters, in each part that runs, fail here before any training."""
    from obliviate.executor import MethodRun
    from obliviate.methods import build_method

    for name in methods:
        for part, which in (("world", "runs"), ("tofu", "tofu_runs")):
            if part in parts:
                run = from_dict(MethodRun, method_runs(cfg, name, which), prefix=f"{which}.{name}")
                build_method(name, run.params)


# ---------------------------------------------------------------- world

def run_world(cfg: AtwuRecipeConfig, methods: list[str], out: Path, progress: bool) -> tuple[dict, dict]:
    """The world part: returns (metrics, timings)."""
    from obliviate.recipes.compare import CompareConfig, method_run, score_against, utility
    from obliviate.eval.token_scores import token_score_aurocs
    from obliviate.models.load import load_model
    from obliviate.models.tokenizer import load_tokenizer
    from obliviate.pretrain import cached_pretrain, world_for
    from obliviate.executor import unlearn
    from obliviate.utils import seed_everything

    parts = out / "parts" / "world"
    ccfg = CompareConfig(seed=cfg.seed, pretrain=cfg.pretrain, methods=list(methods), oracle=False,
                         runs={n: method_runs(cfg, n) for n in methods})
    world = world_for(cfg.pretrain)
    root = cached_pretrain(cfg.pretrain, progress=progress)
    tok = load_tokenizer(str(root / "model"))
    base_model = load_model(str(root / "model"))
    facts = world.facts_by_split("forget")
    pre_key = {"pretrain": config_hash(to_dict(cfg.pretrain))}
    timings: dict = {}

    def base_part():
        return {"metrics": evaluate_world(base_model, tok, world, splits=WORLD_SPLITS),
                "token_aurocs": token_score_aurocs(base_model, tok, facts,
                                                   corpus_texts=[d["text"] for d in world.documents()])}

    base, timings["world_base_seconds"] = cached_part(parts / "base.json", pre_key, base_part)
    metrics: dict = {"base": dict(base["metrics"])}
    aur = base["token_aurocs"]
    metrics["token_baselines"] = {n: {"token_auroc": aur[n]} for n in ("uniform", "probability", "rarity")}
    metrics["token_labels"] = {"n_specific": aur["n_specific"], "n_structural": aur["n_structural"]}
    b = metrics["base"]

    for name in methods:
        ucfg, used = method_run(ccfg, name)
        key = {**pre_key, "seed": cfg.seed, "run": used}

        def method_part():
            seed_everything(cfg.seed)
            model = load_model(str(root / "model"))
            model, summary = unlearn(model, tok, forget_pairs(world), retain_pairs(world), ucfg, None,
                                     progress=progress, resume=False)
            m = evaluate_world(model, tok, world, splits=WORLD_SPLITS)
            m.update(score_against(b, m))
            m.update(uq_metrics(b["forget_qa_acc"], m["forget_qa_acc"], utility(b), utility(m)))
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
    from obliviate.executor import MethodRun

    run = from_dict(MethodRun, method_runs(cfg, name, "tofu_runs"), prefix=f"tofu_runs.{name}")
    return dataclasses.replace(cfg.tofu, method=name, unlearn=run)


def _tofu_row(m: dict, prefix: str = "tofu_") -> dict:
    keys = ("forget_quality", "model_utility", "retain_utility", "forget10_rouge_l", "retain_rouge_l", "forget_prob", "retain_prob",
            "forget_truth_ratio")
    return {f"{prefix}{k}": m.get(k) for k in keys}


def run_tofu_part(cfg: AtwuRecipeConfig, methods: list[str], out: Path, progress: bool) -> tuple[dict, dict]:
    """The TOFU part: returns (metrics, timings); metrics keys are prefixed ``tofu_``."""
    from obliviate.tofu import prepare_bases, unlearn_and_evaluate, unlearn_config

    parts = out / "parts" / "tofu"
    configs = {name: tofu_method_config(cfg, name) for name in methods}
    for c in configs.values():
        unlearn_config(c)  # bad overrides fail before any training
    bases = prepare_bases(cfg.tofu, progress=progress)
    timings = {f"tofu_{k}": v for k, v in bases.timings.items()}
    f_key, r_key = ("forget_rouge_l", "retain_rouge_l") if cfg.tofu_uq_from == "rouge_l" else ("forget_prob",
                                                                                                "retain_prob")
    b = bases.metrics["base"]
    metrics: dict = {"base": _tofu_row(b), "tofu_retain_model": _tofu_row(bases.metrics["retain_model"])}
    base_key = {"bases": {k: v.name for k, v in bases.roots.items()}, "limit": cfg.tofu.limit,
                "max_new_tokens": cfg.tofu.max_new_tokens, "uq_from": cfg.tofu_uq_from}
    for name in methods:
        key = {**base_key, "unlearn": to_dict(unlearn_config(configs[name]))}

        def method_part():
            _, res, *_ = unlearn_and_evaluate(configs[name], bases, None, progress=progress)
            m = _tofu_row(res)
            m.update({f"tofu_{k}": v for k, v in uq_metrics(b[f_key], res[f_key], b[r_key], res[r_key]).items()})
            return m

        metrics[name], timings[f"tofu_{name}_seconds"] = cached_part(parts / f"{name}.json", key, method_part)
    return metrics, timings


# ---------------------------------------------------------------- claims

def _best(metrics: dict, methods: list[str], key: str) -> tuple[str | None, float | None]:
    vals = [(metrics[n][key], n) for n in methods if metrics.get(n, {}).get(key) is not None]
    if not vals:
        return None, None
    v, n = max(vals)
    return n, v


def make_claims(cfg: AtwuRecipeConfig, metrics: dict, methods: list[str], tofu_ran: bool) -> list[Claim]:
    """The paper's four claims with our verdicts (ATWU = the ``atwu`` method, SATGA+)."""
    claims = []
    where, key = ("TOFU", "tofu_uq") if tofu_ran else ("the world (TOFU not run)", "uq")
    others = [n for n in methods if not is_scored(n)]
    atwu = metrics.get("atwu", {}).get(key) if "atwu" in methods else None
    rival, rival_uq = _best(metrics, others, key)
    c1 = f"ATWU reaches UQ {PAPER_UQ} on TOFU, the best of the methods compared"
    c2 = f"ATWU's UQ is {PAPER_MARGIN} points above the runner-up"
    if atwu is None or rival is None:
        why = "ATWU did not run or its UQ is undefined" if atwu is None else "no baseline method has a UQ"
        claims.append(Claim(c1, "–", None, f"Not testable: {why}."))
        claims.append(Claim(c2, "–", None, f"Not testable: {why}."))
    else:
        margin = atwu - rival_uq
        claims.append(Claim(
            c1, f"UQ {atwu:.1f} on {where} (best baseline {rival} {rival_uq:.1f})", atwu > rival_uq,
            f"On {where} ATWU's UQ is {atwu:.1f}, " + ("above" if margin > 0 else "not above")
            + f" the best baseline ({rival}, {rival_uq:.1f}); the absolute value is not comparable with the paper's "
              f"{PAPER_UQ} (a tiny model trained from scratch, our FQ/RD from "
            + ("ROUGE-L" if tofu_ran and cfg.tofu_uq_from == "rouge_l" else "accuracy or probability") + ")."))
        claims.append(Claim(
            c2, f"{margin:+.1f} points over {rival}", margin > 0,
            f"ATWU is {margin:+.1f} UQ points from the runner-up {rival} on {where} (the paper: +{PAPER_MARGIN}); "
            + ("it agrees in direction" + (" and size." if margin >= PAPER_MARGIN else ", not in size.")
               if margin > 0 else "so the ordering does not reproduce here.")))

    # Token scores against the true spans.
    base_aur = {n: v["token_auroc"] for n, v in metrics.get("token_baselines", {}).items()}
    learned = metrics.get("atwu", {}).get("token_auroc")
    c3 = "learned token scores align with the true forget-specific spans better than heuristics"
    if learned is None or not base_aur:
        claims.append(Claim(c3, "–", None, "Not testable: the world part or ATWU did not run."))
    else:
        beaten = [n for n, v in base_aur.items() if learned > v]
        lost = [f"{n} {v:.2f}" for n, v in base_aur.items() if learned <= v]
        agrees = not lost
        sent = (f"ATWU's learned scores ({cfg.token_auroc_on} reading) reach token AUROC {learned:.2f} on the "
                "world's forget answers, "
                + ("above every baseline (" + ", ".join(f"{n} {base_aur[n]:.2f}" for n in beaten) + ")."
                   if agrees else
                   ("above " + ", ".join(f"{n} {base_aur[n]:.2f}" for n in beaten) + " but " if beaten else "")
                   + "not above " + ", ".join(lost) + "."
                   + (" In the synthetic world the forget-specific tokens are invented names and values, so "
                      "rarity or low probability already marks them almost perfectly."
                      if any(base_aur.get(n, 0.0) >= 0.9 and learned <= base_aur[n] for n in ("probability", "rarity"))
                      else "")))
        claims.append(Claim(c3, f"AUROC {learned:.2f} vs " + ", ".join(f"{n} {v:.2f}" for n, v in base_aur.items()),
                            agrees, sent))

    # Utility kept near the original.
    c4 = "ATWU keeps utility near the original model's"
    if "atwu" not in methods or "atwu" not in metrics:
        claims.append(Claim(c4, "–", None, "Not testable: ATWU did not run."))
    else:
        a = metrics["atwu"]
        if tofu_ran and a.get("tofu_model_utility") is not None and metrics["base"].get("tofu_model_utility"):
            mu0, mu = metrics["base"]["tofu_model_utility"], a["tofu_model_utility"]
            drop = max(0.0, (mu0 - mu) / mu0)
            what = f"TOFU model utility {mu:.3f} vs {mu0:.3f} before (drop {100 * drop:.0f}%)"
        else:
            drop = a.get("rd")
            what = f"world retain degradation RD = {drop:.2f}" if drop is not None else "–"
        if drop is None:
            claims.append(Claim(c4, what, None, "Not testable: the base model's utility is zero."))
        else:
            ok = drop <= cfg.near_utility
            claims.append(Claim(c4, what, ok, f"After ATWU, {what}: " + ("within" if ok else "beyond")
                                + f" the {100 * cfg.near_utility:.0f}% we count as near the original."))
    return claims


# ---------------------------------------------------------------- report

WORLD_COLUMNS = ["method", "forget_qa_acc", "retain_qa_acc", "general_qa_acc", "fq", "rd", "uq", "s_unlearning",
                 "token_auroc"]
AUROC_COLUMNS = ["scorer", "token_auroc", "token_auroc_base", "token_auroc_unlearned", "score_mean"]
TOFU_COLUMNS = ["method", "tofu_forget10_rouge_l", "tofu_retain_rouge_l", "tofu_fq", "tofu_rd", "tofu_uq",
                "tofu_forget_quality", "tofu_model_utility", "tofu_retain_utility"]


def _plots(out: Path, metrics: dict, methods: list[str], tofu_ran: bool) -> list[str]:
    from obliviate.report import plot_grouped_bars

    md = []
    uq = {n: {k: metrics[n].get(k) for k in (("uq", "tofu_uq") if tofu_ran else ("uq",))
              if metrics[n].get(k) is not None} for n in methods}
    if any(uq.values()):
        plot_grouped_bars({n: {("world UQ" if k == "uq" else "TOFU UQ"): v for k, v in g.items()}
                           for n, g in uq.items()}, out / "uq.png", "unlearning quality (UQ)", "UQ",
                          ylim=(0, 105))
        md.append("![UQ](uq.png)")
    aur = {n: {"token AUROC": v["token_auroc"]} for n, v in metrics.get("token_baselines", {}).items()}
    aur.update({n: {"token AUROC": metrics[n]["token_auroc"]} for n in methods
                if metrics[n].get("token_auroc") is not None})
    if aur:
        plot_grouped_bars(aur, out / "token_auroc.png", "token scores vs forget-specific tokens (world)", "AUROC")
        md.append("![token AUROC](token_auroc.png)")
    return md


def _report(cfg, out: Path, metrics: dict, methods: list[str], parts: list[str], tofu_note: str | None,
            claims: list[Claim], seconds: float) -> None:
    tofu_ran = "tofu" in parts and tofu_note is None
    sections = [("Setting", (
        f"A reconstruction of {PAPER} (docs/methods.md) at tiny scale. ATWU = SATGA+ with the learned linear token "
        "scorer; `atwu_npo` / `atwu_simnpo` = NPO / SimNPO with ATWU's weights. "
        "FQ = (F0 - Fu)/F0, RD = max(0, (R0 - Ru)/R0), UQ = 100 HM(FQ, 1 - RD). World: F = forget QA accuracy, "
        f"R = mean of retain and general QA accuracy (world seed {cfg.pretrain.world.seed}, run seed {cfg.seed}). "
        + (f"TOFU: F / R = forget10 / retain {'ROUGE-L recall' if cfg.tofu_uq_from == 'rouge_l' else 'probability'}; "
           "forget quality = KS-test p-value against the retain-only model; model utility = TOFU's harmonic mean "
           "of 9 numbers." if "tofu" in parts else "") + "\n"))]
    if "world" in parts:
        rows = [{"method": "base", **metrics["base"]}] + [{"method": n, **metrics[n]} for n in methods]
        sections.append(("World: unlearning quality and token AUROC", markdown_table(rows, WORLD_COLUMNS)))
        aur_rows = [{"scorer": f"{n} (baseline)", "token_auroc": v["token_auroc"]}
                    for n, v in metrics["token_baselines"].items()]
        aur_rows += [{"scorer": n, **{k: metrics[n].get(k) for k in AUROC_COLUMNS[1:]}}
                     for n in methods if metrics[n].get("token_auroc") is not None]
        lab = metrics["token_labels"]
        sections.append(("World: token scores against forget-specific tokens", (
            f"{lab['n_specific']} forget-specific and {lab['n_structural']} structural answer tokens of the "
            "forget facts. Learned scores: the final scorer (w, b) read out on the original model's hidden states "
            "(`token_auroc_base`) and on the unlearned model's (`token_auroc_unlearned`); `token_auroc` is the "
            f"{cfg.token_auroc_on} reading. Probability: 1 - p under the original model; rarity: inverse token "
            "frequency in the world's corpus; uniform: all ties (0.5).\n\n"
            + markdown_table(aur_rows, AUROC_COLUMNS))))
    if "tofu" in parts:
        if tofu_ran:
            rows = [{"method": "base", **metrics["base"]}, {"method": "retain-only", **metrics["tofu_retain_model"]}]
            rows += [{"method": n, **metrics[n]} for n in methods]
            sections.append(("TOFU (tiny-model protocol)", f"{TINY_SCALE_NOTE}\n\n" + markdown_table(rows, TOFU_COLUMNS)))
        else:
            sections.append(("TOFU (tiny-model protocol)", f"Skipped: {tofu_note}\n"))
    figs = _plots(out, metrics, methods, tofu_ran)
    if figs:
        sections.append(("Plots", "\n\n".join(figs) + "\n"))
    write_report(out, "ATWU: learned token-level importance for unlearning", cfg.command or "obliviate reproduce atwu",
                 sections, claims, seconds)


# ---------------------------------------------------------------- the recipe

@recipe("atwu", AtwuRecipeConfig, "ATWU (learned token importance) vs GradDiff/NPO/SimNPO/WGA on the world and TOFU")
def run(cfg: AtwuRecipeConfig, out, progress: bool = True) -> dict:
    """Both parts, the claims, ``report.md`` and (last) ``results.json``; returns the results payload."""
    from obliviate.results import write_results
    from obliviate.tofu import check_tofu_data

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
    claims = make_claims(cfg, metrics, methods, tofu_ran)
    timings["total_seconds"] = time.time() - t0
    _report(cfg, out, metrics, methods, parts, tofu_note, claims, timings["total_seconds"])
    notes = {"parts": parts, "methods": methods, "tofu": "ran" if tofu_ran else (tofu_note or "not requested")}
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, claims=claims_json(claims), timings=timings,
                  notes=notes)
    return {"metrics": metrics, "claims": claims, "timings": timings, "notes": notes}
