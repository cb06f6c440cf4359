"""``obliviate probe-directions``: toxicity probe directions per layer and their pairwise cosines."""

from __future__ import annotations

from obliviate.cli.args import add_common, positive_float_arg
from obliviate.cli.inputs import check_out_dir, input_paths
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.models.load import load_model_and_tokenizer
from obliviate.pipelines.probe_directions import run_probe_directions
from obliviate.tasks.world import WorldConfig
from obliviate.utils import recorded_path


def parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        layers = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--layers {text!r}: expected comma-separated layer indices, e.g. 0,2,3") from None
    if not layers:
        raise ConfigError(f"--layers {text!r}: no layer given")
    return layers


def cmd_probe_directions(args) -> None:
    cfg = build_config(WorldConfig, args.config, args.overrides, base={"seed": args.seed})
    layers = parse_layers(args.layers)
    if args.out is not None:
        check_out_dir(args.out, input_paths(args))
    model, tok = load_model_and_tokenizer(args.model, args.pad_policy, tokenizer_path=args.tokenizer)
    _, lines = run_probe_directions(model.eval(), tok, cfg, layers, C=args.C, seed=args.seed, out=args.out,
                                    config={"world": cfg.__dict__, "model": recorded_path(args.model)})
    for line in lines:
        print(line)


def register(sub) -> None:
    s = sub.add_parser("probe-directions", help="toxicity probe directions per layer and their pairwise "
                                                "cosines (overrides set the world config)")
    add_common(s, out_required=False)
    s.add_argument("--model", required=True, help="model directory (or hub id)")
    s.add_argument("--tokenizer", help="tokenizer directory, if not the model's")
    s.add_argument("--layers", help="comma-separated decoder layers, e.g. 0,2,3 (default: early/middle/late)")
    s.add_argument("--C", type=positive_float_arg, default=1.0, help="inverse L2 strength "
                                                                     "of the logistic probes")
    s.add_argument("--pad-policy", choices=["error", "eos"], default="error",
                   help="what to do when the tokenizer has no pad token")
    s.set_defaults(fn=cmd_probe_directions)
