"""The run of ``obliviate probe-directions`` (:mod:`obliviate.cli.probe_directions`): a logistic probe of
toxic vs neutral world sentences at each chosen decoder layer
(:func:`~obliviate.eval.probes.probe_directions`), and the pairwise cosines of their directions (the
multi-layer toxicity paper: most pairs below 0.5)."""

from __future__ import annotations

from obliviate.eval.probes import default_probe_layers, pairwise_cosine, probe_directions, toxic_probe_data
from obliviate.models.layers import check_layer, num_layers
from obliviate.runs.results import prepare_out_dir, write_results
from obliviate.tasks.world import WorldConfig, generate_world


def format_matrix(layers: list[int], m) -> str:
    head = "layer " + "".join(f"{l:>8d}" for l in layers)
    rows = [f"{l:>5d} " + "".join(f"{v:8.3f}" for v in row) for l, row in zip(layers, m)]
    return "\n".join([head, *rows])


def run_probe_directions(model, tok, cfg: WorldConfig, layers: list[int] | None = None, *, C: float = 1.0,
                         seed: int = 0, out=None, config: dict | None = None) -> tuple[dict, list[str]]:
    """The probes of ``model`` at ``layers`` (default: early, middle and late; each checked against the model
    before ``out`` is touched) on the world of ``cfg``; given ``out``, ``results.json`` with ``config``.
    Returns the metrics (layers, cosine matrix, held-out and training accuracy per layer) and the lines to
    print."""
    layers = sorted({check_layer(model, l) for l in (layers or default_probe_layers(num_layers(model)))})
    out = prepare_out_dir(out) if out else None  # every check passed: now the run directory is touched
    texts, y = toxic_probe_data(generate_world(cfg))
    probes = probe_directions(model, tok, texts, y, layers, C=C, seed=seed)
    cos = pairwise_cosine({l: p["direction"] for l, p in probes.items()})
    lines = [f"toxic vs neutral probes on {len(texts)} world sentences (world seed {cfg.seed})",
             "held-out probe "
             "accuracy: " + ", ".join(f"layer {l} {p['accuracy']:.3f}" for l, p in probes.items()),
             "pairwise cosine of the probe directions:", format_matrix(layers, cos)]
    off = [cos[i, j] for i in range(len(layers)) for j in range(i + 1, len(layers))]
    if off:
        below = sum(abs(c) < 0.5 for c in off)
        lines.append(f"{below}/{len(off)} layer pairs with |cosine| < 0.5 (the paper: most pairs < 0.5)")
    metrics = {"layers": layers, "cosine": cos.tolist(),
               "probe_accuracy": {str(l): p["accuracy"] for l, p in probes.items()},
               "probe_train_accuracy": {str(l): p["train_accuracy"] for l, p in probes.items()},
               "n_texts": len(texts)}
    if out is not None:
        write_results(out, seed=seed, config={**(config or {}), "layers": layers, "C": C}, metrics=metrics)
        lines.append(f"results: {out / 'results.json'}")
    return metrics, lines
