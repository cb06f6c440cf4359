"""The main job on the embedded default: world -> base model -> evaluation -> report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.pretrain import PretrainConfig, cached_pretrain
from obliviate.results import write_results


@dataclass
class DemoConfig:
    seed: int = 0
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)


def load_base(root: Path):
    from obliviate.models.load import load_model
    from obliviate.models.tokenizer import load_tokenizer

    model = load_model(str(root / "model"))
    tok = load_tokenizer(str(root / "model"))
    model.eval()
    return model, tok


def run_demo(cfg: DemoConfig, out: Path, progress: bool = True) -> dict:
    from obliviate.data import encode_documents
    from obliviate.eval.world import evaluate_world
    from obliviate.pretrain import world_for
    from obliviate.report import markdown_table, plot_grouped_bars, plot_loss_curve
    from obliviate.utils import seed_everything

    t0 = time.time()
    seed_everything(cfg.seed)
    world = world_for(cfg.pretrain)
    world.save(out / "world")
    base_root = cached_pretrain(cfg.pretrain, progress=progress)
    model, tok = load_base(base_root)
    dataset = encode_documents(tok, world.documents(), max_len=cfg.pretrain.model.max_len)
    base = evaluate_world(model, tok, world, dataset)
    metrics = {"base": base}
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    plot_loss_curve(base_root / "metrics.jsonl", plots / "base_loss.png", "base model pretraining loss")
    accs = {k.replace("_qa_acc", ""): v for k, v in base.items() if k.endswith("_qa_acc")}
    plot_grouped_bars({"base": accs}, plots / "domain_accuracy.png", "QA exact match by split", "accuracy")
    rows = [{"split": k, "qa_acc": v, "qa_rouge": base.get(f"{k}_qa_rouge"), "mcq_acc": base.get(f"{k}_mcq_acc")}
            for k, v in accs.items()]
    report = [
        "# obliviate demo",
        "",
        f"seed {cfg.seed}; world fingerprint `{world.fingerprint()[:12]}`; base model cached at `{base_root}`.",
        "",
        "## Base model",
        "",
        markdown_table(rows, ["split", "qa_acc", "qa_rouge", "mcq_acc"]),
        "",
        "Per-domain token loss on the pretraining corpus: "
        + ", ".join(f"{k[5:]} {v:.3f}" for k, v in base.items() if k.startswith("loss_")),
        "",
        "![loss](plots/base_loss.png)",
        "",
        "![accuracy](plots/domain_accuracy.png)",
        "",
        f"Finished in {time.time() - t0:.0f} s.",
    ]
    (out / "report.md").write_text("\n".join(report) + "\n")
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics)
    return metrics
