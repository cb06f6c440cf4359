"""Compare unlearning methods on one base model, against the oracle, under attack.

For each method: unlearn the base model on the world's forget facts while
retaining the retain and general facts, evaluate (forget / retain accuracy,
S-unlearning, distance to the oracle), then attack (relearning, linear probe,
format shift). Each method's finished result is stored in
``out/methods/<name>/result.json`` and its unlearned model in
``out/methods/<name>/model``, so an interrupted comparison resumes where it
stopped; the base and oracle models are copied to ``out/models/``, so the run
directory holds every model it reports on. The report shows one table, a Pareto plot (forget vs retain) and
the relearning recovery curves, as Markdown and as self-contained HTML.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.attacks.controls import robustness_markdown, robustness_summary, suppression_control
from obliviate.attacks.suite import TaskAttackConfig, run_task_attacks
from obliviate.data import encode_documents
from obliviate.eval import s_unlearning
from obliviate.eval.oracle import oracle_distance, world_truth_ratios
from obliviate.methods.engine import UnlearnConfig, method_run_config, unlearn
from obliviate.models.load import load_model
from obliviate.models.tokenizer import load_tokenizer
from obliviate.train.pretrain import PretrainConfig, cached_pretrain, cached_pretrain_pair, world_for
from obliviate.runs.report import (
    _plt,
    markdown_table,
    plot_grouped_bars,
    plot_recovery_curves,
    plot_tradeoff,
    read_jsonl,
    save_figure,
    write_html,
)
from obliviate.runs.results import atomic_write_json, atomic_write_text
from obliviate.tasks.world import (
    AttackSuiteConfig,
    evaluate_world,
    forget_pairs,
    retain_pairs,
    run_attacks,
    task_from_world,
)
from obliviate.train.distributed import barrier, is_main_process, save_trained
from obliviate.utils import seed_everything


@dataclass
class CompareConfig:
    seed: int = 0
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    methods: list[str] = field(default_factory=lambda: ["graddiff", "npo", "simnpo", "rmu"])
    runs: dict = field(default_factory=dict)
    """Per-method overrides: ``runs.npo.lr=5e-4``, ``runs.rmu.params.coef=10``."""
    attacks: AttackSuiteConfig = field(default_factory=AttackSuiteConfig)
    oracle: bool = True
    """Also pretrain the oracle (no forget facts) and report each method's distance to it."""
    parallel_pretrain: bool = False
    """Pretrain the base model and the oracle at the same time, one thread each (a second process)."""
    attack_references: bool = True
    """Also attack the base and oracle models (reference points for the recovery curves)."""
    positive_control: bool = True
    """Build and attack a model known to only suppress (:func:`obliviate.attacks.controls.suppression_control`)."""
    disjoint: TaskAttackConfig = field(default_factory=lambda: TaskAttackConfig(
        corpus=False, probe=False, lr_grid=[3e-4], lora=False))
    """The disjoint-halves relearning attack and membership inference on every model (one learning rate and
    no LoRA by default, to keep the demo within minutes; ``obliviate attack`` tries the whole grid)."""


def method_run(cfg: CompareConfig, name: str) -> tuple[UnlearnConfig, dict]:
    """Method ``name``'s run: its "tiny" preset (the world models are tiny), then ``cfg.runs[name]``."""
    return method_run_config(name, cfg.runs.get(name), "tiny", cfg.seed)


def utility(m: dict) -> float:
    """The retain/utility score used by S-unlearning: mean of retain- and general-domain QA accuracy."""
    return 0.5 * (m["retain_qa_acc"] + m["general_qa_acc"])


def score_against(base: dict, m: dict) -> dict:
    s = s_unlearning(base["forget_qa_acc"], m["forget_qa_acc"], utility(base), utility(m), chance=0.0)
    return {"u": s["u"], "r": s["r"], "s_unlearning": s["s"]}


def _copy_model(src: Path, dst: Path) -> None:
    """Copy a cached model directory into the run (rank 0; kept if already there); every process waits."""
    if is_main_process() and not (dst / "config.json").exists():
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, tmp)
        tmp.rename(dst)
    barrier()


def run_compare(cfg: CompareConfig, out: Path, progress: bool = True) -> dict:
    """Compare ``cfg.methods`` on the world; the run directory ``out`` holds every model reported.

    Returns ``metrics``, ``curves``, ``configs``, ``timings`` and ``model_dirs`` (``{"base": ...,
    "oracle": ..., "<method>": ...}``: ``out/models/base``, ``out/models/oracle`` and
    ``out/methods/<method>/model``).
    """

    for name in cfg.methods:
        method_run(cfg, name)
    t0 = time.time()
    world = world_for(cfg.pretrain)
    world.save(out / "world")
    if cfg.oracle:
        ocfg = copy.deepcopy(cfg.pretrain)
        ocfg.exclude_splits = sorted(set(ocfg.exclude_splits) | {"forget"})
        base_root, oracle_root = cached_pretrain_pair(cfg.pretrain, ocfg, progress, parallel=cfg.parallel_pretrain)
    else:
        base_root = cached_pretrain(cfg.pretrain, progress=progress)
    tok = load_tokenizer(str(base_root / "model"))
    base_model = load_model(str(base_root / "model"))
    dataset = encode_documents(tok, world.documents(), max_len=cfg.pretrain.model.max_len)
    metrics: dict = {"base": evaluate_world(base_model, tok, world, dataset)}
    roots = {"base": base_root}
    oracle_tr = None
    if cfg.oracle:
        roots["oracle"] = oracle_root
        oracle_model = load_model(str(roots["oracle"] / "model"))
        metrics["oracle"] = evaluate_world(oracle_model, tok, world, dataset)
        oracle_tr = world_truth_ratios(oracle_model, tok, world.facts_by_split("forget"))
        del oracle_model  # attacked later from its directory, like every reference: not held through the method loop
        metrics["oracle"].update(score_against(metrics["base"], metrics["oracle"]))
    model_dirs: dict = {}
    for ref_name, root in roots.items():
        _copy_model(root / "model", out / "models" / ref_name)
        model_dirs[ref_name] = str(out / "models" / ref_name)
    base_acc = metrics["base"]["forget_qa_acc"]
    curves: dict = {}
    timings: dict = {}  # wall times live outside ``metrics``: same seed, same metrics
    task = task_from_world(world)

    def robustness_attacks(model) -> dict:
        """Disjoint-halves relearning, membership inference, recovery cost (and the paragraph attack's
        numbers under the names the calibration reads)."""
        att = run_task_attacks(model, tok, task, cfg.disjoint, base_model=base_model)
        return {k: v for k, v in att.items() if k.startswith(("relearn_disjoint", "recovery_cost", "mia_auc",
                                                                "recovery_budget"))}

    if cfg.attack_references:
        for ref_name in roots:
            m = load_model(str(roots[ref_name] / "model"))
            att = run_attacks(m, tok, world, base_acc, cfg.attacks)
            curves[ref_name] = att.pop("relearn_curve", None)
            timings[f"{ref_name}_attack_seconds"] = att.pop("attack_seconds", None)
            metrics[ref_name].update(att)
            metrics[ref_name].update(robustness_attacks(m))
    if cfg.positive_control:
        control, info = suppression_control(base_model, tok, task, seed=cfg.seed)
        m = evaluate_world(control, tok, world, dataset)
        m.update(score_against(metrics["base"], m))
        att = run_attacks(control, tok, world, base_acc, cfg.attacks)
        curves["positive_control"] = att.pop("relearn_curve", None)
        att.pop("attack_seconds", None)
        m.update(att)
        m.update(robustness_attacks(control))
        metrics["positive_control"] = m
        timings["positive_control"] = info
        save_trained(control, out / "models" / "positive_control", tok)
        model_dirs["positive_control"] = str(out / "models" / "positive_control")
        del control
    configs = {}
    for name in cfg.methods:
        mdir = out / "methods" / name
        done = mdir / "result.json"
        ucfg, used = method_run(cfg, name)
        configs[name] = used
        model_dirs[name] = str(mdir / "model")
        if done.exists() and (mdir / "model" / "config.json").exists():  # finished, its model kept
            saved = json.loads(done.read_text())
            if saved.get("config") == json.loads(json.dumps(used)):
                metrics[name] = saved["metrics"]
                curves[name] = saved.get("curve")
                timings.update(saved.get("timings", {}))
                continue
        seed_everything(cfg.seed)
        model = load_model(str(base_root / "model"))
        t1 = time.time()
        model, summary = unlearn(model, tok, forget_pairs(world), retain_pairs(world), ucfg, mdir / "train",
                                 progress=progress, resume=False)
        m = evaluate_world(model, tok, world, dataset)
        timings[f"{name}_unlearn_seconds"] = time.time() - t1
        m.update(score_against(metrics["base"], m))
        if oracle_tr is not None:
            m.update(oracle_distance(model, None, tok, world, oracle_truth_ratios=oracle_tr,
                                     oracle_forget_acc=metrics["oracle"]["forget_qa_acc"],
                                     forget_acc=m["forget_qa_acc"]))
        att = run_attacks(model, tok, world, base_acc, cfg.attacks)
        curves[name] = att.pop("relearn_curve", None)
        timings[f"{name}_attack_seconds"] = att.pop("attack_seconds", None)
        m.update(att)
        m.update(robustness_attacks(model))
        metrics[name] = m
        save_trained(model, mdir / "model", tok)  # before result.json: a finished method has its model
        atomic_write_json(done, {"config": used, "metrics": m, "curve": curves[name],
                                 "timings": {k: v for k, v in timings.items() if k.startswith(f"{name}_")}})
    for m in metrics.values():  # the paragraph attack under the names the calibration reads
        if m.get("relearn_forget_qa_acc") is not None:
            m.update(relearn_acc=m["relearn_forget_qa_acc"], relearn_start_acc=m.get("relearn_initial_acc"))
    if "relearn_forget_qa_acc" in metrics["base"]:
        metrics["base"]["relearn_base_acc"] = metrics["base"]["forget_qa_acc"]
    robustness = robustness_summary(metrics)
    timings["total_seconds"] = time.time() - t0
    write_report(out, cfg, metrics, curves, configs, timings["total_seconds"], base_root, robustness)
    return {"metrics": metrics, "curves": curves, "configs": configs, "timings": timings, "model_dirs": model_dirs,
            "robustness": robustness}


# ---------------------------------------------------------------- report

COLUMNS = ["model", "forget_qa_acc", "forget_para_qa_acc", "retain_qa_acc", "general_qa_acc", "neighbour_qa_acc",
           "s_unlearning", "forget_quality",
           "abs_forget_acc_gap", "relearn_forget_qa_acc", "relearn_recovered", "probe_acc", "format_qa_paraphrase",
           "format_mcq_cloze", "format_cloze"]


def _rows(metrics: dict) -> list[dict]:
    base_f = metrics["base"]["forget_qa_acc"]
    rows = []
    for name, m in metrics.items():
        row = {"model": name, **{k: m.get(k) for k in COLUMNS if k != "model"}}
        if m.get("relearn_forget_qa_acc") is not None and base_f > 0:
            row["relearn_recovered"] = (m["relearn_forget_qa_acc"] - m["forget_qa_acc"]) / base_f
        rows.append(row)
    return rows


def plot_pareto(metrics: dict, png: Path) -> None:
    plot_tradeoff({name: (m["forget_qa_acc"], utility(m)) for name, m in metrics.items()}, png,
                  "forget QA accuracy (lower is better)", "utility: retain+general QA accuracy",
                  "forget vs retain (arrows: after relearning attack)",
                  arrows={name: m.get("relearn_forget_qa_acc") for name, m in metrics.items()})


def plot_recovery(curves: dict, base_acc: float, png: Path) -> None:
    plot_recovery_curves(curves, png, "relearning steps", "forget QA accuracy",
                         "relearning attack: recovery of forgotten facts", base_line=base_acc)


def plot_base_loss(base_root: Path, png: Path) -> None:
    plt = _plt()
    recs = [r for r in read_jsonl(base_root / "metrics.jsonl") if "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for term in ("lm", "qa"):
        pts = [(r["step"], r[term]) for r in recs if term in r]
        if pts:
            ax.plot(*zip(*pts), label=f"{term} term")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("base model pretraining", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, png)


def write_report(out: Path, cfg: CompareConfig, metrics: dict, curves: dict, configs: dict, seconds: float,
                 base_root: Path | None = None, robustness: dict | None = None) -> None:
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    plot_pareto(metrics, plots / "pareto.png")
    plot_recovery(curves, metrics["base"]["forget_qa_acc"], plots / "recovery.png")
    splits = ("forget", "neighbour", "retain", "general", "concept", "holdout")
    plot_grouped_bars({name: {s: m.get(f"{s}_qa_acc") for s in splits if f"{s}_qa_acc" in m}
                       for name, m in metrics.items()}, plots / "domain_accuracy.png",
                      "QA exact match by split", "accuracy")
    if base_root is not None:
        plot_base_loss(base_root, plots / "base_loss.png")
    rows = _rows(metrics)
    md = [
        "# obliviate: method comparison",
        "",
        f"World seed {cfg.pretrain.world.seed}, run seed {cfg.seed}. Forget = "
        "the world's forget-domain (medicine) facts; utility = mean of retain-domain (biology) and general QA "
        "accuracy; `neighbour_qa_acc` = the forget diseases' other attributes and their look-alike diseases, which no "
        "method trains on as retain data (over-forgetting shows there first); `forget_para_qa_acc` = forget facts asked "
        "in wordings never seen in pretraining. S-unlearning = U x R (docs/evaluation.md). `forget_quality` is the KS-test p-value of truth ratios "
        "against the oracle (higher = closer). `relearn_recovered` is the share of the base model's forget "
        "accuracy that the relearning attack brings back.",
        "",
        markdown_table(rows, COLUMNS),
        "",
        *(robustness_markdown(metrics, robustness) if robustness else []),
        "## How much comes back under relearning on the other half of the facts",
        "",
    ]
    base_d = metrics["base"].get("relearn_disjoint_base_acc")
    for name, m in metrics.items():
        if name in ("base", "oracle") or m.get("relearn_disjoint_acc") is None or not base_d:
            continue
        share = (m["relearn_disjoint_acc"] - m["relearn_disjoint_start_acc"]) / base_d
        md.append(f"- **{name}**: forget accuracy {m['relearn_disjoint_start_acc']:.2f} on the held-out halves after "
                  f"unlearning, {m['relearn_disjoint_acc']:.2f} after relearning on the other halves "
                  f"({100 * share:.0f}% of the base model's {base_d:.2f} brought back).")
    if metrics.get("oracle", {}).get("relearn_disjoint_acc") is not None:
        o = metrics["oracle"]
        md.append(f"- the oracle, which never saw the facts, goes from {o['relearn_disjoint_start_acc']:.2f} to "
                  f"{o['relearn_disjoint_acc']:.2f} under the same attack: anything above that is knowledge the method "
                  "hid rather than removed.")
    md.append("- the table's `relearn_forget_qa_acc` / `relearn_recovered` are the paragraph attack's (held-out "
              "paragraphs about the forget diseases): see above whether it is calibrated before reading them.")
    md += ["", "![pareto](plots/pareto.png)", "", "![recovery](plots/recovery.png)", "",
           "![accuracy by split](plots/domain_accuracy.png)", "", "![base model training](plots/base_loss.png)", "",
           "## Method settings", "", "```json", json.dumps(configs, indent=1), "```", "",
           f"Total time {seconds:.0f} s."]
    atomic_write_text(out / "report.md", "\n".join(md) + "\n")
    write_html(out / "report.md", out / "report.html")
