"""The EMBER recipe's ``report.md`` and plots: a pure function of its ``results.json``
(``obliviate reproduce ember --render-only DIR`` re-renders one without training)."""

from __future__ import annotations

from pathlib import Path

from obliviate.papers import markdown_table, write_report
from obliviate.papers.ember.claims import PAPER, claims_of, ordered
from obliviate.runs.report import _plt, plot_grouped_bars, save_figure

WORLD_COLUMNS = ["row", "concept_acc", "similar_acc", "utility_acc", "coherence", "relearn_concept_acc",
                 "regained",
                 "vocab_fraction_edited", "n_tokens_edited"]
LOSS_COLUMNS = ["row", "loss_exclusive", "loss_other", "loss_neutral", "d_loss_exclusive", "d_loss_other",
                "d_loss_neutral"]


def _plot_relearn(rows: dict, methods: list[str], png: Path) -> None:
    import numpy as np

    plt = _plt()
    groups = ["none"] + [m for m in methods if m in rows and f"{m}+ember" in rows]
    names = {g: ("base", "ember") if g == "none" else (g, f"{g}+ember") for g in groups}
    bars = [("after unlearning", "concept_acc", 0), ("after relearning", "relearn_concept_acc", 0),
            ("+EMBER, after "
             "unlearning", "concept_acc", 1), ("+EMBER, after relearning", "relearn_concept_acc", 1)]
    x = np.arange(len(groups))
    w = 0.2
    fig, ax = plt.subplots(figsize=(1.6 * len(groups) + 3, 3.8))
    for i, (label, key, j) in enumerate(bars):
        ax.bar(x + (i - 1.5) * w, [rows[names[g][j]][key] for g in groups], w, label=label,
               hatch="//" if j else None, alpha=0.85)
    ax.axhline(0.25, color="k", lw=0.8, ls=":", label="chance")
    ax.set_xticks(x)
    ax.set_xticklabels(["no MLP method" if g == "none" else g for g in groups])
    ax.set_ylabel("concept MCQ accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title("relearning attack, without and with EMBER", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, png)


def _plot_grid(grid: dict, png: Path) -> None:
    plt = _plt()
    rs = grid["rows"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key in ("concept_acc", "similar_acc", "utility_acc", "coherence"):
        ax.plot([r["delta"] for r in rs], [r[key] for r in rs], marker="o", ms=3, label=key)
    ax.axvline(grid["delta"], color="grey", ls="--", lw=0.8, label=f"chosen delta {grid['delta']:g}")
    ax.set_xscale("log")
    ax.set_xlabel("delta")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("EMBER alone on the world's concept: the delta grid", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, png)


def _plot_real(real: dict, png: Path) -> None:
    stages = [("base", "base"), ("ember", "EMBER"), ("relearn_base", "relearned, no EMBER"),
              ("relearn_ember", "relearned, EMBER")]
    groups = {label: {f"{c[:14]} {kind}": r[s][f"{kind}_ppl"] for c, r in real.items() if s in r
                      for kind in ("concept", "neutral")} for s, label in stages}
    groups = {k: v for k, v in groups.items() if v}
    if groups:
        plot_grouped_bars(groups, png, "real EMBER concepts: held-out perplexity", "perplexity", ylim=None)


def render(results: dict, out: Path) -> None:
    """``out/report.md`` and its plots from ``results`` (the recipe's ``results.json``) alone."""
    out = Path(out)
    cfg, grid, notes = results["config"], results["delta_grid"], results["notes"]
    wc, dc = cfg["world_concept"], cfg["ember_data"]
    rows, real = ordered(results)
    if rows:
        _plot_relearn(rows, wc["methods"], out / "relearn_bars.png")
    if grid is not None:
        _plot_grid(grid, out / "delta_grid.png")
    if real:
        _plot_real(real, out / "real_data_ppl.png")
    sections = [("Setup", (
        f"Paper: {PAPER}. Tiny-scale reproduction (docs/methods.md). Part *world*: the cached tiny base "
        f"model (`pretrain.*`, {cfg['pretrain']['model']['n_layer']} layers) and the world's concept; "
        "concept / similar-domain (people) / utility (biology + medicine) are 4-way MCQ accuracies (chance "
        "0.25). `coherence` = base perplexity / perplexity on the concept sentences at the positions that "
        "neither read nor predict a concept-exclusive term (a proxy for fluent text about the concept; 1 = "
        "unchanged); `loss_exclusive` is the loss at the positions that do, `loss_neutral` the loss on "
        "neutral text. `relearn_concept_acc`: concept accuracy after fine-tuning a copy on the concept's "
        f"relearning paragraphs for {wc['relearn_epochs']} epochs (lr {wc['relearn_lr']:g}, batch "
        f"{wc['relearn_batch_size']}, weight decay {wc['relearn_weight_decay']:g}); `regained` = that minus "
        "the accuracy before the attack. `+ember` rows: EMBER with the delta chosen on the EMBER-only grid, "
        "then the MLP method on top with the same settings as alone (the paper re-tunes it; we do not).\n"))]
    if rows:
        table = [{"row": n, **m, "regained": m["relearn_concept_acc"] - m["concept_acc"]} for n,
                 m in rows.items()]
        body = markdown_table(table, WORLD_COLUMNS, fmt="{:.4f}")
        if grid is not None:
            ja = grid["judge_agreement"]
            body += (f"\nEMBER: |V'| = {grid['n_sentence_tokens']} tokens, {grid['n_candidates']} candidate "
                     f"features (mass ratio >= {wc['min_ratio']:g}), {len(grid['features'])} kept by the "
                     f"`{wc['judge']}` judge, {grid['n_edited']} token rows edited: "
                     f"{', '.join(repr(t) for t in grid['edited_tokens'][:30])}. Factorisation: "
                     f"{grid['factor_iters']} iterations, relative loss {grid['factor_loss']:.3f}. The two "
                     "offline judges (exclusive-term lexicon = ground truth, sentence statistics) agree on "
                     f"{ja['agree']}/{ja['n_candidates']} candidates (lexicon keeps {ja['kept_lexicon']}, "
                     f"sentence statistics {ja['kept_sentences']})."
                     + (f" **Note**: {notes['world_features']}." if "world_features" in notes else "")
                     + "\n\n![relearning](relearn_bars.png)\n")
        sections.append(("World concept: unlearning and relearning", body))
        sections.append(("Where the loss changes (concept sentences: positions reading or predicting an "
                         "exclusive term vs the others; neutral text)",
                         markdown_table([{"row": n, **m} for n, m in rows.items()], LOSS_COLUMNS)))
    if grid is not None:
        gcols = ["delta", "concept_acc", "similar_acc", "utility_acc", "coherence", "efficacy", "specificity",
                 "n_tokens_edited"]
        sections.append(("EMBER delta grid (world)",
                         markdown_table(grid["rows"], gcols) + f"\nChosen delta {grid['delta']:g} "
                         f"(HM {grid['score']:.3f}; {grid['reason']}).\n\n![delta grid](delta_grid.png)\n"))
    if "data" in notes:
        sections.append(("Real EMBER concepts", f"Skipped: {notes['data']}\n"))
    elif real:
        table = []
        for c, r in real.items():
            row = {"concept": c, "edited": r.get("n_tokens_edited"),
                   "vocab_fraction": r.get("vocab_fraction_edited"),
                   "delta": r.get("delta")}
            for s in ("base", "ember", "relearn_base", "relearn_ember"):
                if s in r:
                    row[f"{s} concept/neutral ppl"] = f"{r[s]['concept_ppl']:.1f} / {r[s]['neutral_ppl']:.1f}"
            table.append(row)
        cols = ["concept", "edited", "vocab_fraction", "delta", "base concept/neutral "
                                                                "ppl", "ember concept/neutral ppl",
                "relearn_base concept/neutral ppl", "relearn_ember concept/neutral ppl"]
        sections.append(("Real EMBER concepts", (
            f"Per concept a tokenizer ({dc['vocab_size']} tokens) and a {dc['n_layer']}-layer "
            f"d={dc['d_model']} model trained from scratch on {100 * (1 - dc['heldout']):.0f}% of the "
            f"concept and neutral sentences ({dc['train_steps']} steps); perplexity on the held-out rest. "
            "EMBER's judge: the sentence-statistics judge; delta by the grid on perplexity (module "
            f"docstring). Relearning: the concept's first {dc['n_relearn']} relearning paragraphs, "
            f"{dc['relearn_epochs']} epochs, applied to the EMBER-edited model and, for "
            "reference, to the unedited one.\n\n" + markdown_table(table, cols, fmt="{:.4f}")
            + "\n![real data](real_data_ppl.png)\n")))
    write_report(out, "EMBER: embedding erasure against relearning (tiny scale)",
                 cfg["command"] or "obliviate reproduce ember", sections, claims_of(results),
                 results["timings"]["total_seconds"])
