"""The ATWU paper's claims and our agreement with each: pure functions of the recipe's ``results.json``."""

from __future__ import annotations

from obliviate.methods import get_method
from obliviate.papers import Claim

PAPER = "Yuce, Nikolaou, Flammarion 2026, Learning What to Forget (seed 001)"
PAPER_UQ, PAPER_MARGIN = 91.7, 5.8


def is_scored(name: str) -> bool:
    """Whether ``name`` is an ATWU method (it learns token scores)."""
    return hasattr(get_method(name), "token_scores")


def _best(metrics: dict, methods: list[str], key: str) -> tuple[str | None, float | None]:
    vals = [(metrics[n][key], n) for n in methods if metrics.get(n, {}).get(key) is not None]
    if not vals:
        return None, None
    v, n = max(vals)
    return n, v


def make_claims(results: dict) -> list[Claim]:
    """The paper's four claims, each with our agreement (ATWU = the ``atwu`` method, SATGA+), from
    ``results.json``."""
    cfg, metrics, notes = results["config"], results["metrics"], results["notes"]
    methods, tofu_ran = notes["methods"], notes["tofu"] == "ran"
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
            + f" the best baseline ({rival}, {rival_uq:.1f}); the absolute value is not comparable with the "
              f"paper's {PAPER_UQ} (a tiny model trained from scratch, our FQ/RD from "
            + ("ROUGE-L" if tofu_ran and cfg['tofu_uq_from'] == "rouge_l" else "accuracy "
            "or probability") + ")."))
        claims.append(Claim(
            c2, f"{margin:+.1f} points over {rival}", margin > 0,
            f"ATWU is {margin:+.1f} UQ points from the runner-up "
            f"{rival} on {where} (the paper: +{PAPER_MARGIN}); "
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
        sent = (f"ATWU's learned scores ({cfg['token_auroc_on']} reading) reach token AUROC {learned:.2f} on "
                "the world's forget answers, "
                + ("above every baseline (" + ", ".join(f"{n} {base_aur[n]:.2f}" for n in beaten) + ")."
                   if agrees else
                   ("above " + ", ".join(f"{n} {base_aur[n]:.2f}" for n in beaten) + " but "
                    if beaten else "")
                   + "not above " + ", ".join(lost) + "."
                   + (" In the synthetic world the forget-specific tokens are invented names and values, so "
                      "rarity or low probability already marks them almost perfectly."
                      if any(base_aur.get(n, 0.0) >= 0.9 and learned <= base_aur[n]
                             for n in ("probability", "rarity"))
                      else "")))
        claims.append(Claim(c3, f"AUROC {learned:.2f} "
                                "vs " + ", ".join(f"{n} {v:.2f}" for n, v in base_aur.items()),
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
            ok = drop <= cfg['near_utility']
            claims.append(Claim(c4, what, ok, f"After ATWU, {what}: " + ("within" if ok else "beyond")
                                + f" the {100 * cfg['near_utility']:.0f}% we count as near the original."))
    return claims
