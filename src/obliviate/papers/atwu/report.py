"""The ATWU recipe's ``report.md`` and plots: a pure function of its ``results.json``
(``obliviate reproduce atwu --render-only DIR`` re-renders one without training)."""

from __future__ import annotations

from pathlib import Path

from obliviate.eval.tofu import TINY_SCALE_NOTE
from obliviate.papers import markdown_table, write_report
from obliviate.papers.atwu.claims import PAPER, make_claims
from obliviate.runs.report import plot_grouped_bars


WORLD_COLUMNS = ["method", "forget_qa_em", "retain_qa_em", "general_qa_em", "fq", "rd", "uq", "s_unlearning",
                 "token_auroc"]
AUROC_COLUMNS = ["scorer", "token_auroc", "token_auroc_base", "token_auroc_unlearned", "score_mean"]
TOFU_COLUMNS = ["method", "tofu_forget10_rouge_l", "tofu_retain_rouge_l", "tofu_fq", "tofu_rd", "tofu_uq",
                "tofu_forget_quality", "tofu_model_utility", "tofu_retain_utility"]


def _plots(out: Path, metrics: dict, methods: list[str], tofu_ran: bool) -> list[str]:
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
        plot_grouped_bars(aur, out / "token_auroc.png", "token scores vs forget-specific "
                                                        "tokens (world)", "AUROC")
        md.append("![token AUROC](token_auroc.png)")
    return md


def render(results: dict, out: Path) -> None:
    """``out/report.md`` and its plots from ``results`` (the recipe's ``results.json``) alone."""
    out = Path(out)
    cfg, metrics, notes = results["config"], results["metrics"], results["notes"]
    methods, parts = notes["methods"], notes["parts"]
    tofu_note = None if notes["tofu"] in ("ran", "not requested") else notes["tofu"]
    tofu_ran = "tofu" in parts and tofu_note is None
    sections = [("Setting", (
        f"A reconstruction of {PAPER} (docs/methods.md) at tiny scale. ATWU = SATGA+ with the learned linear "
        "token scorer; `atwu_npo` / `atwu_simnpo` = NPO / SimNPO with ATWU's weights. FQ = (F0 - Fu)/F0, RD "
        "= max(0, (R0 - Ru)/R0), UQ = 100 HM(FQ, 1 - RD). World: F = forget QA accuracy, R = mean of retain "
        f"and general QA accuracy (world seed {cfg['pretrain']['world']['seed']}, run seed {cfg['seed']}). "
        + ("TOFU: F / R = forget10 / retain "
           f"{'ROUGE-L recall' if cfg['tofu_uq_from'] == 'rouge_l' else 'probability'}; forget quality = "
           "KS-test p-value against the retain-only model; model utility = TOFU's "
           "harmonic mean of 9 numbers." if "tofu" in parts else "") + "\n"))]
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
            "forget facts. Learned scores: the final scorer (w, b) read out on the original model's hidden "
            "states (`token_auroc_base`) and on the unlearned model's (`token_auroc_unlearned`); "
            f"`token_auroc` is the {cfg['token_auroc_on']} reading. Probability: 1 - p under the original "
            "model; rarity: inverse token frequency in the world's corpus; uniform: all ties (0.5).\n\n"
            + markdown_table(aur_rows, AUROC_COLUMNS))))
    if "tofu" in parts:
        if tofu_ran:
            rows = [{"method": "base", **metrics["base"]},
                    {"method": "retain-only", **metrics["tofu_retain_model"]}]
            rows += [{"method": n, **metrics[n]} for n in methods]
            sections.append(("TOFU (tiny-model protocol)",
                             f"{TINY_SCALE_NOTE}\n\n" + markdown_table(rows, TOFU_COLUMNS)))
        else:
            sections.append(("TOFU (tiny-model protocol)", f"Skipped: {tofu_note}\n"))
    figs = _plots(out, metrics, methods, tofu_ran)
    if figs:
        sections.append(("Plots", "\n\n".join(figs) + "\n"))
    write_report(out, "ATWU: learned token-level importance for unlearning",
                 cfg['command'] or "obliviate reproduce atwu", sections, make_claims(results),
                 results["timings"]["total_seconds"])
