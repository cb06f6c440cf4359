"""The EMBER paper's claims and our agreement with each: pure functions of the recipe's ``results.json``."""

from __future__ import annotations

from obliviate.papers import Claim

PAPER = "Suslik, Shafran, Geva 2026, Don't Forget Your Embeddings (seeds 000/003)"
PAPER_VOCAB_FRACTION = 0.0014
LLAMA3_VOCAB = 128256
HALVED = 0.65
"""Claim 1 agrees when relearned accuracy with EMBER is at most this share of the one without (mean over
methods)."""
CONFINED = 0.25
"""Claim 3 agrees when the loss change off the exclusive tokens is at most this share of the change on
them."""


def ordered(results: dict) -> tuple[dict, dict]:
    """The world rows in table order (base, ember, then each method alone and with EMBER) and the real
    concepts in the order they ran (``results.json`` sorts its keys)."""
    metrics, real = results["metrics"], results["real_data"]
    names = ["base",
             "ember"] + [n for m in results["config"]["world_concept"]["methods"] for n in (m, f"{m}+ember")]
    concepts = results["notes"].get("concepts", sorted(real))
    return {n: metrics[n] for n in names if n in metrics}, {c: real[c] for c in concepts if c in real}


def claims_of(results: dict) -> list[Claim]:
    """:func:`make_claims` of a ``results.json``."""
    rows, real = ordered(results)
    return make_claims(results["config"]["world_concept"]["methods"], rows, real)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def make_claims(methods: list[str], rows: dict, real: dict) -> list[Claim]:
    """The paper's three claims, each with our agreement: ``methods`` are the MLP methods of the world part,
    ``rows`` its rows, ``real`` the real concepts' results (in the order they ran)."""
    methods = [m for m in methods if m in rows and f"{m}+ember" in rows]
    claims = []

    # 1. relearned accuracy roughly halved
    c1 = "Relearned concept accuracy roughly halves with EMBER: RMU/CRISP 70-76% -> 35% on Llama-3.1-8B"
    if not methods:
        claims.append(Claim(c1, "world part not run", None, "Not testable here: the world part did not run."))
    else:
        pairs = {m: (rows[m]["relearn_concept_acc"],
                     rows[f"{m}+ember"]["relearn_concept_acc"]) for m in methods}
        ours = "; ".join(f"{m} {_pct(a)} -> {_pct(b)}" for m, (a, b) in pairs.items())
        regained = {m: rows[m]["relearn_concept_acc"] - rows[m]["concept_acc"] for m in methods}
        edited = [m for m in methods if rows[f"{m}+ember"].get("n_tokens_edited", 0) > 0]
        testable = [m for m in edited if regained[m] >= 0.1 and pairs[m][0] > 0]
        if not edited:
            claims.append(Claim(c1, ours, None, "Not testable here: EMBER edited no token (its judge kept no "
                                "feature), so every +ember row is its method alone."))
        elif not testable:
            claims.append(Claim(c1, ours, None, "Not testable here: without EMBER the relearning attack "
                                                "regained less than 10 points for every method, so there was "
                                                "nothing for EMBER to prevent."))
        else:
            ratio = sum(pairs[m][1] / pairs[m][0] for m in testable) / len(testable)
            agrees = ratio <= HALVED
            claims.append(Claim(c1, f"{ours} (mean ratio {ratio:.2f})", agrees,
                                f"{'Agrees' if agrees else 'Disagrees'}: with EMBER the relearned concept "
                                f"accuracy is {ratio:.2f} of the accuracy without it (mean over "
                                f"{', '.join(testable)}; 'roughly halved' read as <= {HALVED}); chance is "
                                f"25%, the base model {_pct(rows['base']['concept_acc'])}."))

    # 2. vocabulary fraction
    c2 = "EMBER edits at most 0.14% of the vocabulary"
    fracs = {}
    if "ember" in rows:
        fracs["world"] = (rows["ember"]["vocab_fraction_edited"], rows["ember"]["n_tokens_edited"])
    for name, r in real.items():
        fracs[name] = (r.get("vocab_fraction_edited", 0.0), r.get("n_tokens_edited", 0))
    if not fracs:
        claims.append(Claim(c2, "nothing run", None, "Not testable here: no part ran."))
    else:
        worst = max(f for f, _ in fracs.values())
        ours = "; ".join(f"{k} {100 * f:.2f}% ({n} tokens)" for k, (f, n) in fracs.items())
        agrees = worst <= PAPER_VOCAB_FRACTION
        sentence = (f"{'Agrees' if agrees else 'Disagrees'}: at most "
                    f"{100 * worst:.2f}% of the vocabulary was edited.")
        if not agrees:
            sizes = sorted({round(n / f) for f, n in fracs.values() if f > 0})
            most = max(n for _, n in fracs.values())
            sentence += (f" Our vocabularies are tiny ({' and '.join(f'{v:,}' for v in sizes)} tokens "
                         f"against Llama-3's {LLAMA3_VOCAB:,}), so one token is already "
                         f"{100 / min(sizes):.2f}%; 0.14% of Llama-3's vocabulary is "
                         f"~{PAPER_VOCAB_FRACTION * LLAMA3_VOCAB:.0f} tokens, and we edit at most {most}.")
        claims.append(Claim(c2, ours, agrees, sentence))

    # 3. coherence cost confined to concept-exclusive tokens
    c3 = "EMBER's coherence cost is confined to concept-exclusive tokens"
    e = rows.get("ember")
    if e is None or e.get("d_loss_exclusive") is None:
        claims.append(Claim(c3, "world part not run", None, "Not testable here: the world part did not run."))
    else:
        dx, do, dn = e["d_loss_exclusive"], e["d_loss_other"], e["d_loss_neutral"]
        ours = (f"loss change: at exclusive tokens {dx:+.3f}, other "
                f"concept-text positions {do:+.3f}, neutral {dn:+.3f}")
        mlp = "; ".join(f"{m}: {rows[m]['d_loss_exclusive']:+.3f} / "
                        f"{rows[m]['d_loss_other']:+.3f}" for m in methods)
        contrast = f" For contrast (exclusive / other): {mlp}." if mlp else ""
        if dx <= 0.05:
            claims.append(Claim(c3, ours, None, "Not testable here: EMBER did not raise the loss on the "
                                                f"exclusive tokens measurably ({dx:+.3f} nats).{contrast}"))
        else:
            agrees = do <= CONFINED * dx and abs(dn) <= CONFINED * dx
            claims.append(Claim(c3, ours, agrees,
                                f"{'Agrees' if agrees else 'Disagrees'}: on the concept sentences EMBER "
                                "raised the loss where a concept-exclusive token is read or predicted by "
                                f"{dx:.3f} nats and elsewhere by {do:+.3f} (neutral text {dn:+.3f}); "
                                f"'confined' read as <= {CONFINED} of the exclusive change.{contrast}"))
    return claims
