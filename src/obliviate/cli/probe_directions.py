"""``obliviate probe-directions``: toxicity probe directions per layer and their pairwise cosines."""

from __future__ import annotations

from obliviate.cli.args import add_common, positive_float_arg
from obliviate.cli.inputs import check_out_dir, input_paths
from obliviate.config import build_config
from obliviate.errors import ConfigError
from obliviate.eval.probes import default_probe_layers, pairwise_cosine, probe_directions, toxic_probe_data
from obliviate.models.layers import check_layer, num_layers
from obliviate.models.load import check_vocab, load_model
from obliviate.models.tokenizer import ensure_pad_token
from obliviate.models.load import load_tokenizer
from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.tasks.world import WorldConfig, generate_world


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


def format_matrix(layers: list[int], m) -> str:
    head = "layer " + "".join(f"{l:>8d}" for l in layers)
    rows = [f"{l:>5d} " + "".join(f"{v:8.3f}" for v in row) for l, row in zip(layers, m)]
    return "\n".join([head, *rows])


def cmd_probe_directions(args) -> None:
    cfg = build_config(WorldConfig, args.config, args.overrides, base={"seed": args.seed})
    if args.out is not None:
        check_out_dir(args.out, input_paths(args))
    model = load_model(args.model)
    model.eval()
    tok = load_tokenizer(args.tokenizer or args.model)
    ensure_pad_token(tok, policy=args.pad_policy)
    check_vocab(model, tok, args.model, args.tokenizer)
    layers = parse_layers(args.layers) or default_probe_layers(num_layers(model))
    layers = sorted({check_layer(model, l) for l in layers})
    out = prepare_out_dir(args.out) if args.out else None  # every check passed: now --out is touched
    texts, y = toxic_probe_data(generate_world(cfg))
    probes = probe_directions(model, tok, texts, y, layers, C=args.C, seed=args.seed)
    cos = pairwise_cosine({l: p["direction"] for l, p in probes.items()})
    print(f"toxic vs neutral probes on {len(texts)} world sentences (world seed {cfg.seed})")
    print("held-out probe accuracy: " + ", ".join(f"layer {l} {p['accuracy']:.3f}" for l, p in probes.items()))
    print("pairwise cosine of the probe directions:")
    print(format_matrix(layers, cos))
    off = [cos[i, j] for i in range(len(layers)) for j in range(i + 1, len(layers))]
    if off:
        below = sum(abs(c) < 0.5 for c in off)
        print(f"{below}/{len(off)} layer pairs with |cosine| < 0.5 (the paper: most pairs < 0.5)")
    if out is not None:
        metrics = {"layers": layers, "cosine": cos.tolist(),
                   "probe_accuracy": {str(l): p["accuracy"] for l, p in probes.items()},
                   "probe_train_accuracy": {str(l): p["train_accuracy"] for l, p in probes.items()},
                   "n_texts": len(texts)}
        write_results(out, seed=args.seed, config={"world": cfg.__dict__, "model": args.model, "layers": layers,
                                                    "C": args.C}, metrics=metrics)
        print(f"results: {out / 'results.json'}")


def register(sub) -> None:
    s = sub.add_parser("probe-directions", help="toxicity probe directions per layer and their pairwise cosines "
                                                "(overrides set the world config)")
    add_common(s, out_required=False)
    s.add_argument("--model", required=True, help="model directory (or hub id)")
    s.add_argument("--tokenizer", help="tokenizer directory, if not the model's")
    s.add_argument("--layers", help="comma-separated decoder layers, e.g. 0,2,3 (default: early/middle/late)")
    s.add_argument("--C", type=positive_float_arg, default=1.0, help="inverse L2 strength of the logistic probes")
    s.add_argument("--pad-policy", choices=["error", "eos"], default="error",
                   help="what to do when the tokenizer has no pad token")
    s.set_defaults(fn=cmd_probe_directions)
