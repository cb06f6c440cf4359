"""``obliviate tofu``: the TOFU protocol on tiny models, or on yours (``--model`` and ``--retain-model``)."""

from __future__ import annotations

from pathlib import Path

from obliviate.cli.args import add_common
from obliviate.cli.inputs import check_out_dir, input_paths
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.eval.tofu import TINY_SCALE_NOTE
from obliviate.pipelines.tofu import GivenModels, TofuConfig, check_run, run_tofu


def cmd_tofu(args) -> None:
    given = None
    if args.model:
        if not args.retain_model:
            raise ConfigError("--model needs --retain-model (the TOFU retain model, trained without the "
                              "forget split: forget quality is measured against it)")
        given = GivenModels(args.model, args.retain_model, args.tokenizer, args.pad_policy or "error")
    else:
        for opt in ("retain_model", "tokenizer", "pad_policy"):
            if getattr(args, opt) is not None:
                raise ConfigError(f"--{opt.replace('_', '-')} needs --model")
    base = {"seed": args.seed, **({"method": args.method} if args.method else {}),
            **({"forget": args.forget} if args.forget else {})}
    cfg = build_config(TofuConfig, args.config, args.overrides, base=base)
    for flag in ("method", "forget"):  # named by a flag and again by --config or an override: one must go
        if getattr(args, flag) and getattr(cfg, flag) != getattr(args, flag):
            raise ConfigError(f"config key '{flag}' ({getattr(cfg, flag)!r}) contradicts --{flag} "
                              f"{getattr(args, flag)}: give it once")
    check_run(cfg, args.out, given)  # before the output directory is touched
    # (the TOFU checks name a given model first)
    check_out_dir(args.out, input_paths(args, args.retain_model))
    res = run_tofu(cfg, args.out, progress=not args.no_progress, given=given)
    m, rouge = res["metrics"], f"{cfg.forget}_rouge_l"
    print(f"base {cfg.forget} ROUGE-L {m['base'][rouge]:.3f} (retain-only model "
          f"{m['retain_model'][rouge]:.3f})")
    mias = [k for k in m[cfg.method] if k.startswith("mia_auc_")]
    for key in ("forget_quality", "model_utility", "retain_utility", rouge, "extraction_strength",
                "exact_memorization", *mias):
        print(f"{cfg.method}: {key} {m['base'].get(key, float('nan')):.4g} -> {m[cfg.method][key]:.4g}")
    for line in res["notes"]:
        print(f"note: {line}")
    if given is None:
        print(f"note: {TINY_SCALE_NOTE}")
    print(f"results: {Path(args.out) / 'results.json'}")


def register(sub) -> None:
    s = sub.add_parser("tofu", help="TOFU: fine-tune tiny models on full and the retain split (or start from "
                                    "--model and --retain-model), unlearn the forget split, report forget "
                                    "quality, model utility, extraction strength, exact memorization and, "
                                    "with TOFU's holdout split, six MIAs")
    add_common(s, example="unlearn.train.lr=1e-4 unlearn.train.steps=50")
    s.add_argument("--method", help="unlearning method (see `obliviate "
                                    "methods`); default: the config's (graddiff)")
    s.add_argument("--forget", help="forget split: forget01, forget05 or forget10 (default; retain split "
                                    "retain99, retain95, retain90)")
    g = s.add_argument_group("given models (instead of training tiny ones)")
    g.add_argument("--model", help="model fine-tuned on TOFU full (directory "
                                   "or hub id): evaluated and unlearned")
    g.add_argument("--retain-model", help="the same base fine-tuned on the retain split only (directory or "
                                          "hub id); required with --model")
    g.add_argument("--tokenizer", help="tokenizer directory or hub id, if not the model's")
    g.add_argument("--pad-policy", choices=["error", "eos"], help="what to do when the tokenizer "
                                                                  "has no pad token (default: error)")
    s.set_defaults(fn=cmd_tofu)
