"""Unlearning commands: methods, unlearn, compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dataclasses import dataclass, field

from obliviate.cli import add_common, seeded
from obliviate.unlearn import UnlearnConfig
from obliviate.world import WorldConfig


@dataclass
class UnlearnCommandConfig:
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    unlearn: UnlearnConfig = field(default_factory=UnlearnConfig)


def cmd_methods(args) -> None:
    from obliviate.methods import method_names

    for name in method_names():
        print(name)


def cmd_unlearn(args) -> None:
    from obliviate.compare import forget_pairs, retain_pairs, score_against
    from obliviate.config import build_config
    from obliviate.data import encode_documents
    from obliviate.eval.world import evaluate_world
    from obliviate.models.load import check_vocab, load_model
    from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
    from obliviate.results import input_fingerprint, prepare_out_dir, same_run, write_results
    from obliviate.train.distributed import is_main_process, save_trained
    from obliviate.unlearn import unlearn
    from obliviate.utils import seed_everything
    from obliviate.world import generate_world

    base = seeded(args.seed, ["seed", "world.seed", "unlearn.seed"])
    base["unlearn"]["method"] = args.method
    cfg = build_config(UnlearnCommandConfig, args.config, args.overrides, base=base)
    model = load_model(args.base)
    tok = ensure_pad_token(load_tokenizer(args.tokenizer or args.base), policy=args.pad_policy)
    check_vocab(model, tok, args.base, args.tokenizer)
    world = generate_world(cfg.world)
    out = prepare_out_dir(args.out)
    # A rerun into the same --out resumes the training checkpoints, unless they belong to another run.
    resume = same_run(out, {"command": "unlearn", "config": cfg, "base": input_fingerprint(args.base),
                            "tokenizer": input_fingerprint(args.tokenizer), "pad_policy": args.pad_policy})
    if not resume:
        print(f"obliviate: {out} holds checkpoints of another run (other config or model); starting afresh",
              file=sys.stderr)
    seed_everything(cfg.seed)
    ds = encode_documents(tok, world.documents())
    before = evaluate_world(model, tok, world, ds)
    model, summary = unlearn(model, tok, forget_pairs(world), retain_pairs(world), cfg.unlearn, out / "train",
                             progress=not args.no_progress, resume=resume)
    after = evaluate_world(model, tok, world, ds)
    after.update(score_against(before, after))
    save_trained(model, out / "model", summary, tok)  # rank 0 writes, in one process or several
    if not is_main_process():
        return
    write_results(out, seed=cfg.seed, config=cfg, metrics={"base": before, cfg.unlearn.method: after},
                  model_dir=str(out / "model"))
    print(f"{cfg.unlearn.method}: forget QA {before['forget_qa_acc']:.3f} -> {after['forget_qa_acc']:.3f}, "
          f"retain QA {before['retain_qa_acc']:.3f} -> {after['retain_qa_acc']:.3f}, "
          f"S-unlearning {after['s_unlearning']:.3f}")


def run_compare_command(args, default_methods=None) -> dict:
    from obliviate.compare import CompareConfig, run_compare
    from obliviate.config import build_config
    from obliviate.results import prepare_out_dir, write_results

    base = seeded(args.seed, ["seed", "pretrain.seed", "pretrain.world.seed", "attacks.seed"])
    if default_methods is not None:
        base["methods"] = default_methods
    cfg = build_config(CompareConfig, args.config, args.overrides, base=base)
    out = prepare_out_dir(args.out)
    res = run_compare(cfg, out, progress=not args.no_progress)
    write_results(out, seed=cfg.seed, config=cfg, metrics=res["metrics"], method_settings=res["configs"],
                  timings=res["timings"])
    cols = ["forget_qa_acc", "retain_qa_acc", "s_unlearning", "relearn_forget_qa_acc"]
    print(f"{'model':14s} " + " ".join(f"{c:>22s}" for c in cols))
    for name, m in res["metrics"].items():
        vals = [m.get(c) for c in cols]
        print(f"{name:14s} " + " ".join(f"{v:22.3f}" if isinstance(v, float) else f"{'-':>22s}" for v in vals))
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")
    return res


def cmd_compare(args) -> None:
    run_compare_command(args)


def register(sub) -> None:
    s = sub.add_parser("methods", help="list the registered unlearning methods, one per line")
    s.set_defaults(fn=cmd_methods)
    s = sub.add_parser("unlearn", help="unlearn the world's forget facts from a base model")
    add_common(s)
    s.add_argument("--base", required=True, help="base model directory (or hub id)")
    s.add_argument("--method", required=True, help="method name (see `obliviate methods`)")
    s.add_argument("--tokenizer", help="tokenizer directory, if not the model's")
    s.add_argument("--pad-policy", choices=["error", "eos"], default="error")
    s.set_defaults(fn=cmd_unlearn)
    s = sub.add_parser("compare", help="several methods on one base model: table, plots, Markdown and HTML report")
    add_common(s)
    s.set_defaults(fn=cmd_compare)
