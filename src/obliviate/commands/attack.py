"""``obliviate attack``: relearning, linear-probe and format-shift attacks on a saved model."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.attacks import AttackSuiteConfig
from obliviate.cli import add_common as _common, seeded as _seeded
from obliviate.world import WorldConfig


@dataclass
class AttackCommandConfig:
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    """The world the model was trained on (regenerated from ``world.seed``, which defaults to ``--seed``)."""
    attacks: AttackSuiteConfig = field(default_factory=AttackSuiteConfig)


def plot_recovery(curves: dict[str, list], out_png: str | Path, base_acc: float | None = None,
                  title: str = "relearning attack") -> Path:
    """``curves[name] = [[step, acc], ...]`` as lines; ``base_acc`` as a dashed line."""
    from obliviate.report import _plt, save_figure

    plt = _plt()

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, curve in curves.items():
        ax.plot([c[0] for c in curve], [c[1] for c in curve], marker="o", lw=1.5, label=name)
    if base_acc is not None:
        ax.axhline(base_acc, ls="--", color="grey", label="base model")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("forget QA accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, out_png)


def cmd_attack(args) -> None:
    from obliviate.attacks import run_attacks
    from obliviate.attacks.relearn import forget_qa_eval
    from obliviate.config import build_config
    from obliviate.models.load import check_vocab, load_model
    from obliviate.models.tokenizer import load_tokenizer
    from obliviate.results import input_fingerprint, prepare_out_dir, same_run, write_results
    from obliviate.utils import seed_everything
    from obliviate.world import generate_world

    base = _seeded(args.seed, ["seed", "world.seed", "attacks.seed", "attacks.relearn.seed"])
    cfg = build_config(AttackCommandConfig, args.config, args.overrides, base=base)
    out = prepare_out_dir(args.out)
    model = load_model(args.model).eval()
    tok = load_tokenizer(args.tokenizer or args.model)
    check_vocab(model, tok, args.model, args.tokenizer)
    # A rerun into the same --out resumes the relearning checkpoints, unless they belong to another run.
    resume = same_run(out, {"command": "attack", "config": cfg, "model": input_fingerprint(args.model),
                            "tokenizer": input_fingerprint(args.tokenizer), "base": input_fingerprint(args.base)})
    if not resume:
        print(f"obliviate: {out} holds checkpoints of another run (other config or model); starting afresh",
              file=sys.stderr)
    seed_everything(cfg.seed)
    cfg.attacks.relearn.progress = not args.no_progress
    world = generate_world(cfg.world)
    base_acc = None
    if args.base:
        base_model = load_model(args.base).eval()
        check_vocab(base_model, tok, args.base, args.tokenizer or args.model)
        base_acc = forget_qa_eval(tok, world.facts_by_split("forget"))(base_model)
        del base_model
    metrics = run_attacks(model, tok, world, base_acc, cfg.attacks, out_dir=out / "relearn", resume=resume)
    curves = {"paragraphs": metrics["relearn_curve"]}
    if "relearn_facts_curve" in metrics:
        curves["facts (held-out half)"] = metrics["relearn_facts_curve"]
    plot_recovery(curves, out / "relearn_curve.png", base_acc)
    seconds = metrics.pop("attack_seconds", None)  # wall time is not a metric: same seed, same metrics
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, model_dir=str(args.model),
                  base_model_dir=args.base, timings={"attack_seconds": seconds})
    keys = ("relearn_initial_acc", "relearn_forget_qa_acc", "relearn_auc", "relearn_steps_to_base", "probe_acc",
            "format_mcq_cloze", "format_mcq_letters", "format_qa", "format_qa_paraphrase", "format_cloze")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items() if k in keys},
                     indent=1))


def register(sub) -> None:
    s = sub.add_parser("attack", help="relearning, probe and format-shift attacks on a model's forget knowledge")
    _common(s)
    s.add_argument("--model", required=True, help="model directory (the unlearned model)")
    s.add_argument("--tokenizer", help="tokenizer directory, if not the model's")
    s.add_argument("--base", help="model directory of the model before unlearning: its forget QA accuracy is "
                   "the target of steps_to_base (without it, steps_to_base is null)")
    s.set_defaults(fn=cmd_attack)
