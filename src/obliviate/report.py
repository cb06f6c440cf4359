"""Plots and Markdown reports (matplotlib, headless)."""

from __future__ import annotations

import json
from pathlib import Path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def plot_loss_curve(metrics_path: str | Path, out_png: str | Path, title: str = "training loss") -> Path:
    plt = _plt()
    recs = [r for r in read_jsonl(metrics_path) if "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if recs:
        ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return Path(out_png)


def plot_grouped_bars(groups: dict[str, dict[str, float]], out_png: str | Path, title: str, ylabel: str,
                      ylim: tuple[float, float] | None = (0, 1.05)) -> Path:
    """``groups[model][metric] = value`` as grouped bars (one colour per model)."""
    import numpy as np

    plt = _plt()
    models = list(groups)
    metrics = sorted({k for g in groups.values() for k in g}, key=lambda k: list(next(iter(groups.values()))).index(k)
                     if k in next(iter(groups.values())) else 99)
    x = np.arange(len(metrics))
    w = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(metrics) + 2), 3.8))
    for i, m in enumerate(models):
        vals = [groups[m].get(k, float("nan")) for k in metrics]
        ax.bar(x + (i - (len(models) - 1) / 2) * w, vals, w, label=m)
    ax.set_xticks(x)
    ax.set_xticklabels(metrics, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(models) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return Path(out_png)


def markdown_table(rows: list[dict], columns: list[str], fmt: str = "{:.3f}") -> str:
    def cell(v):
        if isinstance(v, float):
            return fmt.format(v) if v == v else "n/a"
        return "" if v is None else str(v)

    head = "| " + " | ".join(columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])
