"""The function-specific paper's claims and our agreement with each: pure functions of ``results.json``."""

from __future__ import annotations

from obliviate.papers import Claim

PAPER = "Atil, Gupta, Passonneau 2026, Model Unlearning Objectives Vary for Distinct Language Functions"
LEARNED = "cosine_rmu_learned_alpha"
KNOWLEDGE = {"rmu": "rmu", "adaptive_rmu": "adaptive_rmu", "cosine_rmu": "cosine_rmu", LEARNED: "cosine_rmu"}
"""Knowledge-forgetting variant -> registered method."""
TOXICITY = {"tox_rmu": "rmu", "tox_probe_single": "probe_unlearn_single", "tox_probe_multi": "probe_unlearn"}
"""Toxicity-forgetting variant -> registered method."""
VARIANTS = {**KNOWLEDGE, **TOXICITY}
MIN_TOXIC = 5
"""The toxicity claims need at least this many toxic held-out continuations from the base model: with fewer,
a reduction is one or two continuations changing, noise rather than a measurement."""


def seeds_of(seed: int, n_seeds: int) -> list[int]:
    """The unlearning seeds of a run: ``seed``, ``seed + 1``, ..., ``n_seeds`` of them."""
    return [seed + i for i in range(n_seeds)]


def claims_of(results: dict) -> list[Claim]:
    """:func:`make_claims` of a ``results.json``."""
    return make_claims(results["metrics"], results["probe_directions"],
                       seeds_of(results["config"]["seed"], results["config"]["n_seeds"]),
                       n_eval_toxic=results["setup"]["eval_toxic"])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def make_claims(metrics: dict, probes: dict, seeds: list[int],
                n_eval_toxic: int | None = None) -> list[Claim]:
    """The paper's claims next to ours; every agreement is computed from the measured numbers.

    ``n_eval_toxic``: how many held-out toxic prompts the toxicity scores are over; when given and the base
    model continues fewer than :data:`MIN_TOXIC` of them toxically, the toxicity claims are not testable.
    """
    claims = []
    n_toxic = None if n_eval_toxic is None else round(metrics["base"]["frac_toxic"] * n_eval_toxic)
    too_few = n_toxic is not None and n_toxic < MIN_TOXIC
    few = "" if not too_few else (
        f"Not testable here: the base model continues only {n_toxic} of the {n_eval_toxic} held-out toxic "
        f"prompts toxically (mean toxicity {metrics['base']['toxicity']:.3f}; at least {MIN_TOXIC} are "
        "needed), so a reduction is a continuation or two changing, not a measurement.")
    # 1. learned-alpha cosine RMU has the best knowledge S.
    others = [v for v in KNOWLEDGE if v != LEARNED]
    s_l = metrics[LEARNED]["s_unlearning"]
    best_other = max(others, key=lambda v: metrics[v]["s_unlearning"])
    s_o = metrics[best_other]["s_unlearning"]
    wins = sum(all(metrics[LEARNED]["per_seed"][i]["s_unlearning"] > metrics[v]["per_seed"][i]["s_unlearning"]
                   for v in others) for i in range(len(seeds)))
    ours = f"S {s_l:.3f} vs best other {best_other} {s_o:.3f}; best on {wins} of {len(seeds)} seeds"
    if abs(s_l - s_o) < 1e-9:
        agrees, sentence = None, (f"Learned-alpha cosine RMU ties with {best_other} at S = {s_l:.3f}, so our "
                                  "world does not separate the objectives here.")
    else:
        agrees = s_l > s_o
        sentence = (f"Learned-alpha cosine RMU {'has' if agrees else 'does not have'} the best mean "
                    f"knowledge S-unlearning ({s_l:.3f} vs {best_other} {s_o:.3f}), and is strictly best on "
                    f"{wins} of {len(seeds)} unlearning seeds (the paper: 3 of 4 models).")
    claims.append(Claim("Meta-learned cosine RMU gives the best S-unlearning on WMDP/MMLU "
                        "on 3 of 4 models (vs RMU, Adaptive RMU)", ours, agrees, sentence))
    # 2. multi-layer probe cuts toxicity 6-24 %, RMU 2-3 %.
    red_m = metrics["tox_probe_multi"].get("toxicity_reduction")
    red_r = metrics["tox_rmu"].get("toxicity_reduction")
    ours = f"multi-layer probe {_pct(red_m)}, RMU {_pct(red_r)} (relative, held-out prompts)"
    if red_m is None or red_r is None:
        agrees, sentence = None, ("The base model's held-out continuations are "
                                  "not toxic, so no reduction is measurable.")
    elif too_few:
        agrees, sentence = None, few
    else:
        agrees = red_m >= 0.06 and red_m > red_r
        in_range = "inside" if 0.06 <= red_m <= 0.24 else "outside"
        sentence = (f"Multi-layer probe unlearning cuts mean continuation toxicity by {_pct(red_m)} "
                    f"({in_range} the paper's 6-24%) and RMU by {_pct(red_r)} (paper: 2-3%), so the "
                    f"multi-layer method {'does' if red_m > red_r else 'does not'} beat RMU here.")
    claims.append(Claim("Multi-layer probe unlearning cuts toxicity by 6-24%, where RMU manages 2-3%", ours,
                        agrees, sentence))
    # 3. multi-layer gives the highest toxicity S.
    tox_s = {v: metrics[v]["s_unlearning"] for v in TOXICITY}
    best = max(tox_s, key=tox_s.get)
    ours = ", ".join(f"{v} {x:.3f}" for v, x in tox_s.items())
    if max(tox_s.values()) - min(tox_s.values()) < 1e-9:
        agrees, sentence = None, (f"All toxicity rows have S = {tox_s[best]:.3f}, "
                                  "so our run does not rank them.")
    elif too_few:
        agrees, sentence = None, few
    else:
        agrees = all(tox_s["tox_probe_multi"] > x for v, x in tox_s.items() if v != "tox_probe_multi")
        sentence = (f"The highest toxicity S is {best}'s ({tox_s[best]:.3f}); the multi-layer method "
                    f"{'is' if agrees else 'is not'} strictly best ({tox_s['tox_probe_multi']:.3f}).")
    claims.append(Claim("The multi-layer probe method has the highest "
                        "toxicity S-unlearning on all models", ours,
                        agrees, sentence))
    # 4. single-layer interventions often fail to reduce toxicity.
    red_s = metrics["tox_probe_single"].get("toxicity_reduction")
    ours = f"single layer {_pct(red_s)}, multi-layer {_pct(red_m)}"
    if red_s is None or red_m is None:
        agrees, sentence = None, "No toxicity to reduce on the held-out prompts."
    elif too_few:
        agrees, sentence = None, few
    else:
        agrees = red_m > red_s
        sentence = (f"The single-layer probe method cuts toxicity by {_pct(red_s)} against {_pct(red_m)} for "
                    "the multi-layer one: coordinating layers "
                    f"{'helps' if agrees else 'does not help'} here.")
    claims.append(Claim("Single-layer interventions often fail to "
                        "reduce toxicity; >= 3 layers work best", ours,
                        agrees, sentence))
    # 5. probe directions differ across layers.
    k, n = probes["n_pairs_below_0.5"], probes["n_pairs"]
    agrees = k > n / 2
    claims.append(Claim("Toxicity probe directions are layer-specific: cosine < 0.5 for most layer pairs",
                        f"{k} of {n} layer pairs |cos| < 0.5 (max {probes['max_offdiag']:.2f}, mean "
                        f"{probes['mean_offdiag']:.2f})", agrees,
                        f"{k} of {n} pairs of layers have probe directions with |cosine| < 0.5 (mean "
                        f"off-diagonal {probes['mean_offdiag']:.2f}), so the directions "
                        f"{'are' if agrees else 'are not'} mostly layer-specific on our model."))
    return claims
