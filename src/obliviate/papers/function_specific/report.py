"""The function-specific recipe's ``report.md`` and plots: a pure function of its ``results.json``
(``obliviate reproduce function-specific --render-only DIR`` re-renders one without training)."""

from __future__ import annotations

import json
from pathlib import Path

from obliviate.papers.function_specific.meta_alpha import plot_alpha_trajectory
from obliviate.papers import markdown_table, write_report
from obliviate.papers.function_specific.claims import VARIANTS, claims_of
from obliviate.runs.report import _plt, save_figure


def ordered(results: dict) -> tuple[dict, dict]:
    """``metrics`` in table order (base, then the variants) and the alpha trajectories by seed
    (``results.json`` sorts its keys as strings)."""
    metrics = results["metrics"]
    rows = {v: metrics[v] for v in ["base", *VARIANTS] if v in metrics}
    trajs = results["alpha_trajectories"]
    return rows, {k: trajs[k] for k in sorted(trajs, key=int)}


def plot_probe_cosine(probes: dict, png: Path) -> None:
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
    """Each row's (U, R) point, per seed (faint) and mean; S = U x R is the rectangle's area (grey iso-S
    lines)."""
    import numpy as np

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.2), sharey=True)
    xs = np.linspace(0.01, 1, 200)
    for ax, function in zip(axes, ("knowledge", "toxicity")):
        for level in (0.25, 0.5, 0.75):
            ax.plot(xs, np.where(level / xs <= 1.05, level / xs, np.nan), color="grey", lw=0.6, ls=":")
        rows = {v: m for v, m in metrics.items() if m.get("function") == function}
        for i, (v, m) in enumerate(rows.items()):
            c = f"C{i}"
            ax.scatter([p["u"] for p in m["per_seed"]], [p["r"] for p in m["per_seed"]], color=c, alpha=0.3,
                       s=18)
            ax.scatter([m["u"]], [m["r"]], color=c, s=60, label=f"{v} (S {m['s_unlearning']:.2f})")
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel("U (forgetting)")
        ax.set_title(f"{function} forgetting", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("R (utility kept)")
    save_figure(fig, png)



COLUMNS = ["variant", "function", "U", "R", "S", "S std", "forget "
                                                          "MCQ", "forget QA", "utility MCQ", "toxicity",
           "frac toxic", "tox reduction", "neutral fidelity"]


def table_rows(metrics: dict) -> list[dict]:
    rows = []
    for v, m in metrics.items():
        rows.append({"variant": v, "function": m.get("function", "reference"), "U": m["u"], "R": m["r"],
                     "S": m["s_unlearning"], "S std": m.get("s_unlearning_std"), "forget "
                     "MCQ": m["forget_mcq_acc"],
                     "forget QA": m["forget_qa_em"], "utility "
                                                     "MCQ": m["knowledge_utility"], "toxicity": m["toxicity"],
                     "frac toxic": m["frac_toxic"], "tox reduction": m.get("toxicity_reduction"),
                     "neutral fidelity": m["neutral_fidelity"]})
    return rows


def report_sections(results: dict) -> list[tuple[str, str]]:
    """The report's sections, from ``results.json``."""
    cfg, n = results["config"], results["setup"]
    (metrics, trajs), probes = ordered(results), results["probe_directions"]
    pre = cfg["pretrain"]
    seeds = ", ".join(str(x) for x in trajs) or str(cfg["seed"])
    setup = (
        f"World seed {pre['world']['seed']}; the cached base model of `pretrain.*` "
        f"({pre['model']['size']}" + (f", {pre['model']['n_layer']} "
                                      "layers" if pre['model']['n_layer'] else "")
        + f"). Unlearning seeds: {cfg['n_seeds']} (from {cfg['seed']}); each number below is the mean over "
          f"seeds. Knowledge rows: {cfg['steps']} steps, lr {cfg['lr']}, trained on all {n['forget_facts']} "
          f"forget facts, scored on the final {n['final_forget']} forget / {n['final_retain']} retain facts "
          f"(the REINFORCE reward uses the disjoint {n['meta_forget']} / {n['meta_retain']} meta facts). "
          f"Toxicity rows: {cfg['tox_steps']} steps, lr {cfg['tox_lr']}, forget = {n['tox_forget']} toxic "
          f"{cfg['tox_inputs']}; scored on {n['eval_toxic']} held-out toxic prompts and {n['eval_neutral']} "
          "held-out neutral prompts (continuations of "
          f"{cfg['max_new_tokens']} tokens, offline lexicon scorer).\n")
    definitions = (
        "- **Knowledge rows** (as WMDP / MMLU): 4-way MCQ accuracy by answer log-likelihood, chance 0.25. U "
        "= clip((A0 - Au) / (A0 - 0.25)) on the final forget MCQs; R = clip((Mu - 0.25) / (M0 - 0.25)), M = "
        "mean MCQ accuracy on the final retain and the general facts (`utility MCQ`).\n- **Toxicity rows**: "
        "U = clip((tox0 - toxu) / tox0), tox = mean lexicon toxicity of greedy continuations of the held-out "
        "toxic prompts (`tox reduction` is the same ratio unclipped). R = mean of (a) the knowledge R above "
        "and (b) the neutral-register fidelity ratio clip(Fu / F0), F = ROUGE-L recall of the continuation "
        "of each held-out neutral prompt against the world's neutral sentence (`neutral fidelity`): a method "
        "that also wipes the kind register loses R. (A component whose base score is at chance is left "
        "out.)\n- S = U x R for every row (the base model: U = 0, R = 1, S = 0); `S` is the mean of the "
        "per-seed S, `S std` its spread over seeds. `forget QA` "
        "(greedy exact match) is shown for reference only.\n")
    main = markdown_table(table_rows(metrics), COLUMNS) + "\n![U and R per row](s_unlearning.png)\n"
    layers = probes["layers"]
    cos_rows = [{"layer": str(l), **{str(m): probes["cosine"][i][j] for j, m in enumerate(layers)}}
                for i, l in enumerate(layers)]
    probe_body = (
        f"Logistic probes (C = 1) on the frozen base model's last-token states of the {probes['n_texts']} "
        "toxic vs neutral training inputs, one per layer; held-out probe accuracy "
        + ", ".join(f"layer {l} "
                    f"{probes['probe_accuracy'][l]:.2f}" for l in sorted(probes["probe_accuracy"], key=int))
        + f". Off-diagonal cosine: max {probes['max_offdiag']:.3f}, mean {probes['mean_offdiag']:.3f}; "
        f"{probes['n_pairs_below_0.5']} of {probes['n_pairs']} pairs with |cos| < 0.5.\n\n"
        + markdown_table(cos_rows, ["layer"] + [str(l) for l in layers], fmt="{:.2f}")
        + "\n![probe direction cosines](probe_cosine.png)\n")
    alpha_lines = [f"- seed {seed}: chosen alpha per outer step "
                   + ", ".join(f"{a:.2f}" for a in [st["chosen_alpha"] for st in t["steps"]])
                   + f"; final exp(mu) = {t['final_alpha']:.2f} (alpha0 = {t['alpha0']:.2f})"
                   for seed, t in trajs.items()]
    alpha_body = (
        f"REINFORCE over log alpha (sigma {cfg['meta_sigma']}, eta {cfg['meta_eta']}, K = {cfg['meta_K']} "
        f"branches of {cfg['steps'] // cfg['meta_outer_steps']} steps, {cfg['meta_outer_steps']} outer "
        f"steps; reward = knowledge S on the meta split). Seeds {seeds}:\n\n" + "\n".join(alpha_lines)
        + "\n\n![alpha trajectory (first seed)](alpha_trajectory.png)\n")
    return [("Setup", setup), ("How U, R and S are defined", definitions), ("Results", main),
            ("Toxicity probe directions across "
             "layers", probe_body), ("Learned retain weight alpha", alpha_body),
            ("Settings", "```json\n" + json.dumps(results["settings"], indent=1, sort_keys=True) + "\n```\n")]


def render(results: dict, out: Path) -> None:
    """``out/report.md`` and its plots from ``results`` (the recipe's ``results.json``) alone."""
    out = Path(out)
    metrics, trajs = ordered(results)
    plot_probe_cosine(results["probe_directions"], out / "probe_cosine.png")
    plot_u_r(metrics, out / "s_unlearning.png")
    first = next(iter(trajs))
    plot_alpha_trajectory(trajs[first], out / "alpha_trajectory.png",
                          title=f"learned retain weight of cosine RMU (seed {first})")
    cfg = results["config"]
    write_report(out, "Function-specific unlearning objectives (seed 002)",
                 cfg["command"] or "obliviate reproduce function-specific", report_sections(results),
                 claims_of(results), results["timings"]["total_seconds"])
