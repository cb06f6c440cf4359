"""Neuron pruning: zero the MLP neurons that tell the forget prompts from the retain prompts.

Łucki et al. 2024 ("An Adversarial Perspective on Machine Unlearning for AI Safety"): each MLP neuron scores
``s_lj = |mean over forget-prompt tokens of a_lj - mean over retain-prompt tokens of a_lj|``; the top
``fraction`` of all neurons are zeroed by a pre-hook on the down-projections. Reads and counts:
docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch

from obliviate.attacks.ablation import forget_prompts, prompt_batches, retain_prompts
from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.scoring import scoring_task
from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import evaluate_task
from obliviate.models.layers import capture_mlp_activations, eval_mode, mlp_down_proj, num_layers
from obliviate.tasks.base import Task


@dataclass
class PruneConfig:
    fractions: list[float] = field(default_factory=lambda: [0.001, 0.005, 0.01, 0.02])
    """Shares of all MLP neurons zeroed, each a point of the sweep."""
    max_prompts: int = 200
    """At most this many forget and retain prompts."""
    batch_size: int = 32

    def __post_init__(self):
        if not self.fractions or any(not 0 < f <= 1 for f in self.fractions):
            raise ConfigError(f"config key 'prune_fractions': each must be in (0, 1], got {self.fractions}")
        if self.max_prompts < 1 or self.batch_size < 1:
            raise ConfigError(f"config key 'prune_max_prompts' / 'prune_batch_size': must be >= 1, got "
                              f"{self.max_prompts}, {self.batch_size}")


@torch.no_grad()
def mean_activations(model, tokenizer, prompts: Sequence[str],
                     batch_size: int = 32) -> dict[int, torch.Tensor]:
    """``{layer: (d_ff,)}`` the mean MLP activation over every non-padding token of ``prompts`` (running sums:
    no token's activations are kept)."""
    layers = list(range(num_layers(model)))
    dev = next(model.parameters()).device
    sums: dict[int, torch.Tensor] = {}
    count = 0
    with eval_mode(model):
        for batch in prompt_batches(tokenizer, prompts, batch_size):
            ids, mask = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
            with capture_mlp_activations(model, layers) as acts:
                model(input_ids=ids, attention_mask=mask, use_cache=False)
            for l in layers:
                s = acts[l][mask.bool()].float().sum(0).cpu()
                sums[l] = s if l not in sums else sums[l] + s
            count += int(mask.sum())
    return {l: s / count for l, s in sums.items()}


def neuron_scores(forget: dict[int, torch.Tensor],
                  retain: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """``{layer: |forget mean - retain mean|}`` per neuron (module docstring)."""
    return {l: (forget[l] - retain[l]).abs() for l in forget}


def top_neurons(scores: dict[int, torch.Tensor], fraction: float) -> dict[int, torch.Tensor]:
    """``{layer: neuron indices}`` of the top ``fraction`` of all neurons by score (at least one; ties: the
    lower layer, then the lower index)."""
    layers = sorted(scores)
    flat = torch.cat([scores[l] for l in layers])
    n = max(1, int(round(fraction * len(flat))))
    order = torch.sort(-flat, stable=True).indices[:n]
    bounds = torch.tensor([0, *torch.cumsum(torch.tensor([len(scores[l]) for l in layers]), 0).tolist()])
    out = {}
    for i, l in enumerate(layers):
        sel = order[(order >= bounds[i]) & (order < bounds[i + 1])] - bounds[i]
        if len(sel):
            out[l] = torch.sort(sel).values
    return out


@contextlib.contextmanager
def pruned(model, neurons: dict[int, torch.Tensor]) -> Iterator[None]:
    """``model`` with the MLP activations of ``neurons`` (``{layer: indices}``) set to zero at the input of
    each layer's down-projection, so that those neurons add nothing to the residual stream; the weights are
    not touched, and the hooks go on exit."""
    handles = []

    def hook(_mod, args, kwargs, idx):
        if args:
            x = args[0].clone()
            x[..., idx.to(x.device)] = 0
            return (x, *args[1:]), kwargs
        name, x = next(iter(kwargs.items()))
        x = x.clone()
        x[..., idx.to(x.device)] = 0
        return args, {**kwargs, name: x}

    try:
        for l, idx in neurons.items():
            handles.append(mlp_down_proj(model, l).register_forward_pre_hook(
                lambda m, a, k, idx=idx: hook(m, a, k, idx), with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()


def prune_attack(model, tokenizer, task: Task, cfg: PruneConfig | None = None, batch_size: int = 32) -> dict:
    """The pruning sweep (module docstring); ``model`` is untouched."""
    cfg = cfg or PruneConfig()
    fp = forget_prompts(task, tokenizer)[:cfg.max_prompts]
    rp = retain_prompts(task, tokenizer)[:cfg.max_prompts]
    if not fp or not rp:
        raise DataError(f"task {task.name!r}: neuron pruning needs forget and retain questions")
    scored = scoring_task(task)
    cost = Cost()
    out: dict = {"prune_by_fraction": {}}
    best = None
    with counting(model, cost=cost):
        scores = neuron_scores(mean_activations(model, tokenizer, fp, cfg.batch_size),
                               mean_activations(model, tokenizer, rp, cfg.batch_size))
        for f in sorted(cfg.fractions):
            neurons = top_neurons(scores, f)
            with pruned(model, neurons):
                m = evaluate_task(model, tokenizer, scored, batch_size=batch_size)
            point = {"neurons": int(sum(len(v) for v in neurons.values())),
                     **{k: v for k, v in m.items() if k in ("forget_score", "retain_score")}}
            out["prune_by_fraction"][f"{f:g}"] = point
            if point.get("forget_score") is not None and (
                    best is None or point["forget_score"] > best[1]["forget_score"]):
                best = (f, point, m["forget_items"])
    if best is not None:
        # top_neurons is nested: fractions that zero as many neurons zero the same ones, one model and one
        # score
        points = {p["neurons"] for p in out["prune_by_fraction"].values()
                  if p.get("forget_score") is not None}
        out.update(prune_forget_score=best[1]["forget_score"], prune_retain_score=best[1].get("retain_score"),
                   prune_fraction=best[0], prune_neurons=best[1]["neurons"],
                   **read_counts("prune", best[2], len(points)))
    out["prune_cost"] = cost.as_dict()
    return out


@register_attack("prune", needs="forget questions (QA pairs or MCQs) and "
                                "retain questions to contrast them with",
                 applies=lambda task: bool(forget_prompts(task)) and bool(retain_prompts(task)),
                 config=PruneConfig,
                 reads=AttackRead("forget_score", "prune_forget_score", chance="forget_chance",
                                  label="the MLP neurons that differ most between forget and retain prompts "
                                        "zeroed, the best of the sweep"))
def prune_run(r: AttackRun, cfg: PruneConfig) -> dict:
    return prune_attack(r.model, r.tokenizer, r.task,
                        replace(cfg, max_prompts=min(cfg.max_prompts, r.cfg.max_eval)))
