"""The token-filtering recipe's ``report.md`` and plots: a pure function of its ``results.json``
(``obliviate reproduce token-filtering --render-only DIR`` re-renders one without training)."""

from __future__ import annotations

import warnings
from pathlib import Path

from obliviate.filtering.refusal import REFUSAL
from obliviate.papers import markdown_table, write_report
from obliviate.papers.token_filtering.claims import claims_of, fmt
from obliviate.runs.report import _plt, save_figure

TITLE = "Token-level pretraining data filtering (Rathi and Radford 2026), tiny scale"


def render(results: dict, out: Path) -> None:
    """``out/report.md`` and its plots from ``results`` (the recipe's ``results.json``) alone."""
    out = Path(out)
    cfg, m, timings = results["config"], results["metrics"], results["timings"]
    plots(out, cfg, m)
    seconds = sum(v for v in timings["parts"].values() if v) or timings["this_invocation_seconds"]
    write_report(out, TITLE, cfg["command"] or "obliviate reproduce token-filtering", sections(cfg, m),
                 claims_of(results), seconds=seconds)


def strategies(cfg: dict) -> list[str]:
    """The pretraining strategies in table order (``results.json`` sorts its keys)."""
    return ["none", *cfg["strategies"]]


def adversarial(cfg: dict) -> list[str]:
    """The adversarially fine-tuned models in table order."""
    return [*cfg["strategies"], "rmu"]


def _rises_warning(m) -> str:
    rises = m.get("fit", {}).get("baseline_rises", {})
    if not any(rises.values()):
        return ""
    parts = [f"{dom} loss {a} -> {b}" for dom, pairs in rises.items() for a, b in pairs]
    return ("\n\n**Warning**: the unfiltered models' held-out loss goes *up* with size "
            f"({', '.join(parts)}): those sizes repeat the corpus for many epochs and overfit it, so the "
            "power law does not hold there and the slowdowns read off it are not meaningful. A scaling study "
            "needs a corpus of at least about as many tokens as the largest model trains on.")


def sections(cfg: dict, m: dict) -> list[tuple[str, str]]:
    """The report's sections from the run's (resolved) config and metrics."""
    lab = m["labels"]
    sec = []
    wl = lab["weak_labels"]
    tc = lab["token_classifier"]
    sweep_rows = [{"threshold": a["threshold"], "precision (weak-trained)": a["precision"],
                   "recall (weak-trained)": a["recall"], "flagged": a["flagged"],
                   "precision (truth-trained)": b["precision"], "recall (truth-trained)": b["recall"]}
                  for a, b in zip(tc["weak"]["sweep"], tc["ground_truth"]["sweep"])]
    body = (f"SAE on layer {lab['sae']['layer']} of the labeller "
            f"({cfg['labeller_layers']}x{cfg['labeller_d']}, {cfg['labeller_steps']} steps): fraction of "
            f"variance unexplained {lab['sae']['fvu']:.3f}, {lab['sae']['n_domain_latents']} domain latents. "
            f"Weak labels against ground truth: precision {wl['precision']:.3f}, recall {wl['recall']:.3f}, "
            f"F1 {wl['f1']:.3f} ({lab['weak_flagged']:.1%} of training tokens flagged, "
            f"{lab['true_fraction']:.1%} truly in the forget domain).\n\nbiLM "
            f"{cfg['bilm_layers']}x{cfg['bilm_d']} token classifier (features pooled over "
            f"+-{cfg['context_window']} tokens) on held-out documents: AUROC {fmt(tc['weak']['auroc'])} fit "
            f"on weak labels, {fmt(tc['ground_truth']['auroc'])} "
            "fit on ground truth.\n\n" + _table(sweep_rows) +
            "\nToken-classifier AUROC when the weak labels it is fit on carry flip noise p: " +
            ", ".join(f"p={r['p']:g}: {fmt(r['auroc'])}" for r in lab["classifier_noise"]) +
            f".\n\nDocument classifier AUROC (document in-domain if > {cfg['doc_label_fraction']:.0%} of its "
            f"tokens): {fmt(lab['document_classifier'].get('weak', {}).get('auroc'))} fit on weak labels, "
            f"{fmt(lab['document_classifier'].get('ground_truth', {}).get('auroc'))} on ground truth.\n")
    sec.append(("Weak labels and classifiers", body))

    rows = []
    for size in cfg['sizes']:
        for s in strategies(cfg):
            v = m[size][s]
            rows.append({"size": size, "strategy": s, "params": v["params"], "tokens": v["tokens"],
                         "epochs": v.get("epochs"),
                         "forget loss": v["forget_loss"], "retain loss": v["retain_loss"],
                         "forget "
                         "slowdown": v["compute_slowdown"], "retain slowdown": v["retain_compute_slowdown"],
                         "flagged": v["flagged_fraction"], "kept docs": v["kept_documents"]})
    fit = m["fit"]
    body = (f"Every size trained on {cfg['tokens_per_param']:g} tokens per parameter (parameters counted "
            "with the tied embedding), compute C = 6ND. Power law on the unfiltered models: forget "
            f"{_law(fit['forget'])}, retain {_law(fit['retain'])}. Slowdown = C / C_eq, C_eq the compute at "
            "which the unfiltered law reaches the model's loss (forget domain: medicine; retain: biology). "
            f"The training corpus has {fit.get('corpus_tokens', '?')} "
            "tokens; `epochs` = training tokens / corpus tokens."
            + _rises_warning(m) + "\n\n" + _table(rows, None, "{:.3g}") + "\n![scaling](scaling.png)\n")
    sec.append(("Scaling and compute slowdown", body))

    par = m["pareto"]
    rows = [{"kind": k, **p} for k in ("token", "document") for p in par[k]]
    body = (f"Size {par['size']}, token filtering = {cfg['pareto_token_strategy']}; unfiltered: forget "
            f"{par['none']['medicine']:.3f}, retain {par['none']['biology']:.3f}. "
            f"{par['documents_dominated']}/{len(par['document'])} document points are dominated.\n\n"
            + markdown_table(rows, ["kind", "threshold", "forget_loss", "retain_loss", "flagged_fraction",
                                    "kept_documents"]) + "\n![pareto](pareto.png)\n")
    sec.append(("Pareto: token vs document filtering", body))

    a = m["adversarial"]
    # runs before it was recorded lack it
    costed = all("recovery_cost_tokens" in m[k] for k in adversarial(cfg))
    rows = [{"model": k, "start forget loss": m[k]["start_forget_loss"],
             "tokens to recover": m[k]["adversarial_tokens"],
             "% of pretraining": None if m[k]["adversarial_tokens"] is None
             else 100 * m[k]["adversarial_tokens_fraction_of_pretraining"],
             **({"recovery cost (half the gap)": m[k]["recovery_cost_tokens"]} if costed else {}),
             "budget": m[k]["adversarial_budget_tokens"]} for k in adversarial(cfg)]
    body = (f"Size {a['size']}; target: the unfiltered model's forget loss {a['baseline_forget_loss']:.3f}; "
            f"pretraining tokens {a['pretraining_tokens']}. Fine-tuning on forget-domain text, lr "
            f"{cfg['adv_lr']:g}, batch {cfg['adv_batch_size']}. "
            + ("The recovery cost is the post-hoc methods' number (compare/demo tables): tokens until half "
               "the gap from the starting forget loss to the target is closed. " if costed else "")
            + f"RMU first raised the forget loss to "
            f"{m['rmu']['loss_after_rmu'].get('medicine', float('nan')):.3f} (retain "
            f"{m['rmu']['loss_after_rmu'].get('biology', float('nan')):.3f}).\n\n"
            + _table(rows, None, "{:.3g}") + "\n![adversarial](adversarial.png)\n")
    sec.append(("Adversarial fine-tuning", body))

    rows = [{"model": k, "forget refusal": v["forget"], "retain refusal": v["retain"],
             "general refusal": v["general"]}
            for k, v in ((k, m["refusal"][k]) for k in cfg["refusal_strategies"] if k in m["refusal"])]
    n = next((m["refusal"][k] for k in cfg["refusal_strategies"] if k in m["refusal"]), {})
    body = (f"Size {cfg['sizes'][-1]}; SFT on {n.get('n_sft', 0)} examples ({cfg['refusal_steps']} steps), "
            f"half refusals (\"{REFUSAL}\") to the forget-domain questions about `{n.get('sft_relation')}`; "
            f"rates on {n.get('n_forget', 0)} forget-domain questions about the other relations and "
            f"{n.get('n_retain', 0)} held-out retain questions.\n\n" + _table(rows, None, "{:.2f}"))
    sec.append(("Refusal training", body))

    ln = m["label_noise"]
    cols = ["p", "forget_loss", "retain_loss", "compute_slowdown", "retain_compute_slowdown"]
    if "by_strategy" in ln:  # several strategies on the same noisy flags (SGTM beside filtering)
        rows = [{"strategy": s, **r} for s, rs in ln["by_strategy"].items() for r in rs]
        body = (f"Size {ln['size']}, {', '.join(ln['by_strategy'])} on the same flags, each flipped with "
                "probability p (SGTM: the model after its dedicated parameters are ablated).\n\n"
                + markdown_table(rows, ["strategy", *cols], "{:.3g}") + "\n![label noise](noise.png)\n")
    else:
        body = (f"Size {ln['size']}, {ln['strategy']}: each pretraining flag flipped with probability p.\n\n"
                + markdown_table(ln["rows"], cols, "{:.3g}") + "\n![label noise](noise.png)\n")
    sec.append(("Label noise", body))
    return sec


def _table(rows: list[dict], columns: list[str] | None = None, fmt: str = "{:.3f}") -> str:
    if not rows:
        return "(none)\n"
    return markdown_table(rows, columns or list(rows[0]), fmt)


def _law(fit) -> str:
    return "not decreasing (no fit)" if fit is None else f"log L = {fit[0]:.3f} {fit[1]:+.4f} log C"


def plots(out: Path, cfg: dict, m: dict) -> None:
    """scaling.png, pareto.png, noise.png and (when the run stored its fine-tuning curves) adversarial.png."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for s in strategies(cfg):
        C = [m[z][s]["flops"] for z in cfg['sizes']]
        axes[0].loglog(C, [m[z][s]["forget_loss"] for z in cfg['sizes']], "o-", label=s)
        axes[1].loglog(C, [m[z][s]["retain_loss"] for z in cfg['sizes']], "o-", label=s)
        if s != "none":
            sl = [m[z][s]["compute_slowdown"] for z in cfg['sizes']]
            if all(v is not None and v > 0 for v in sl):
                axes[2].semilogy([m[z][s]["params"] for z in cfg['sizes']], sl, "o-", label=s)
    axes[0].set(title="forget domain (medicine)", xlabel="training FLOPs", ylabel="held-out loss")
    axes[1].set(title="retain domain (biology)", xlabel="training FLOPs", ylabel="held-out loss")
    axes[2].set(title="forget-domain compute slowdown", xlabel="parameters", ylabel="slowdown (x)")
    for ax in axes:
        ax.legend(fontsize=8)
    save_figure(fig, out / "scaling.png")

    par = m["pareto"]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for k, mk in (("token", "o-"), ("document", "s--")):
        pts = par[k]
        ax.plot([p["retain_loss"] for p in pts], [p["forget_loss"] for p in pts], mk, label=f"{k} filtering")
        for p in pts:
            ax.annotate(f"{p['threshold']:g}", (p["retain_loss"], p["forget_loss"]), fontsize=7)
    ax.plot([par["none"]["biology"]], [par["none"]["medicine"]], "k*", ms=10, label="unfiltered")
    ax.set(xlabel="retain loss (lower is better)", ylabel="forget loss (higher is better)",
           title=f"Pareto, {par['size']}")
    ax.legend(fontsize=8)
    save_figure(fig, out / "pareto.png")

    if all("curve" in m[k] for k in adversarial(cfg)):  # runs before the curves were stored lack them
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for k in adversarial(cfg):
            c = m[k]["curve"]
            ax.plot([max(t, 1) for t, _ in c], [loss for _, loss in c], label=k)
        ax.axhline(m["adversarial"]["baseline_forget_loss"], color="k", ls=":", label="unfiltered")
        ax.set_xscale("log")
        ax.set(xlabel="fine-tuning tokens", ylabel="held-out forget loss",
               title=f"adversarial fine-tuning, {cfg['sizes'][-1]}")
        ax.legend(fontsize=8)
        save_figure(fig, out / "adversarial.png")
    elif not (out / "adversarial.png").exists():
        warnings.warn(f"{out}: results.json holds no fine-tuning curves (a run made before they were "
                      "stored), so adversarial.png cannot be drawn")

    ln = m["label_noise"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for s, rows in ln.get("by_strategy", {ln["strategy"]: ln["rows"]}).items():
        several = "by_strategy" in ln  # then each strategy's retain line dashed
        for key, lab in (("compute_slowdown", "forget"), ("retain_compute_slowdown", "retain")):
            pts = [(r["p"], r[key]) for r in rows if r[key] is not None and r[key] > 0]
            if pts:
                ax.semilogy([p for p, _ in pts], [v for _, v in pts], "s--" if several and lab == "retain" else "o-",
                            label=f"{s}, {lab}" if several else lab)
    ax.set(xlabel="flag flip probability p", ylabel="compute slowdown (x)", title="label noise")
    ax.legend(fontsize=8)
    save_figure(fig, out / "noise.png")
