"""The robustness frontier at a larger scale (issue #59, point 7): the table and figure of
``scripts/robustness_seeds.py`` with a world model at least 8 times the demo's parameters, on two seeds.

The demo's world model is 4 layers at d=128 (about 1.1M parameters with its 2,048-token vocabulary); the default
here is 8 layers at d=320 (about 10M, 9x; SGTM's smallest public configuration has 8M). The world's pretraining
learning rate, 3e-3, leaves this model knowing 0.15 of the forget facts after its 300 steps (its QA loss stalls
at 0.66), so the default here is 1e-3 (``--lr``: forget 1.00, QA loss 0.014 on world seed 0, as the demo's base).
Everything else is the world's default: the same world, the same 300 pretraining steps and batch sizes (so each
model sees the same tokens), and each method at the settings tuned for it on the demo's scale (``tuned=true``,
as the frontier of docs/results.md runs them: the question is what the same settings do on a larger model).
Checks the size before anything runs, then hands over to ``robustness_seeds.py`` (resumable: a finished seed is
read, not rerun).
Hours on a laptop CPU: run it in the background,

    OMP_NUM_THREADS=1 nohup .venv/bin/python scripts/frontier_scale.py --out runs/frontier_scale &

and commit ``OUT/robustness.md`` and ``OUT/frontier.png`` (docs/results/frontier-scale/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from robustness_seeds import main as robustness_seeds  # noqa: E402

from obliviate.train.pretrain import ModelConfig, PretrainConfig, pretrain_param_count  # noqa: E402

METHODS = "graddiff,npo,simnpo,rmu,undo,tar,repnoise,mudman"
ATTACKS = "relearn,relearn_disjoint,relearn_retain,mia,probe,format_shift,quantize,ablate,logit_lens,in_context"
MIN_RATIO = 8.0
"""The larger model has at least this many times the demo's parameters (the issue's bound)."""


def n_params(n_layer: int | None, d_model: int | None, n_head: int | None) -> int:
    """The world model's parameter count at these settings (the world's model with them changed; None: the
    world's)."""
    kw = {k: v for k, v in (("n_layer", n_layer), ("d_model", d_model), ("n_head", n_head)) if v is not None}
    return pretrain_param_count(PretrainConfig(model=ModelConfig(**kw)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/frontier_scale")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--n-layer", type=int, default=8)
    p.add_argument("--d-model", type=int, default=320)
    p.add_argument("--n-head", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3, help="pretraining learning rate (the world's: 3e-3)")
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--tables-only", action="store_true")
    args = p.parse_args(argv)
    demo, large = n_params(None, None, None), n_params(args.n_layer, args.d_model, args.n_head)
    print(f"world model: {large / 1e6:.2f}M parameters, {large / demo:.1f}x the demo's {demo / 1e6:.2f}M", flush=True)
    if large < MIN_RATIO * demo:
        print(f"error: {large / demo:.1f}x the demo's parameters; the larger scale needs at least {MIN_RATIO:g}x",
              file=sys.stderr)
        return 2
    size = [f"pretrain.model.n_layer={args.n_layer}", f"pretrain.model.d_model={args.d_model}",
            f"pretrain.model.n_head={args.n_head}", f"pretrain.train.lr={args.lr:g}",
            "pretrained={sgtm: {route_splits: [forget]}}", "tuned=true"]
    return robustness_seeds(["--out", args.out, "--seeds", *map(str, args.seeds), "--attacks", ATTACKS,
                             "--methods", args.methods, "--title",
                             f"The robustness frontier at {large / 1e6:.1f}M parameters ({large / demo:.0f}x the demo)",
                             *(["--tables-only"] if args.tables_only else []), "--", *size])


if __name__ == "__main__":
    sys.exit(main())
