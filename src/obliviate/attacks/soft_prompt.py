"""Soft prompt: m continuous embeddings before the question, optimised to draw the answers out.

Schwinn et al. 2024, Chen et al. 2025: P (m, d) trained by Adam on the forget facts of fold A to minimise the
answers' NLL, each row projected onto the L2 ball ``P_i <- P_i * min(1, r / ||P_i||)`` after each step, scored
on fold B. Its settings, reads and counts: docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.gcg import Item, allowed_tokens, inserted_terms, suffix_items
from obliviate.errors import ConfigError, DataError
from obliviate.eval.suite import effective_items
from obliviate.models.layers import eval_mode, input_embeddings
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import Task


@dataclass
class SoftPromptConfig:
    m: int = 8
    """Soft tokens."""
    steps: int = 30
    lr: float = 1e-2
    norm_scale: float = 1.0
    """The ball's radius per embedding, in units of the median token-embedding norm."""
    max_items: int = 32
    """At most this many facts of A (trained) and of B (scored) per fold."""
    folds: int = 3
    """The first this many folds of :meth:`~obliviate.tasks.base.Task.forget_folds`, each a fresh P."""
    seed: int = 0

    def __post_init__(self):
        for key in ("m", "max_items", "folds"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key 'soft_prompt_{key}': must be >= 1, got {getattr(self, key)}")
        if self.steps < 0:
            raise ConfigError(f"config key 'soft_prompt_steps': must be >= 0, got {self.steps}")
        if not self.lr > 0 or not self.norm_scale > 0:
            raise ConfigError(f"config key 'soft_prompt_lr' / 'soft_prompt_norm_scale': must be > 0, got "
                              f"{self.lr}, {self.norm_scale}")


def radius(model, tokenizer, norm_scale: float) -> float:
    """``norm_scale`` x the median L2 norm of the tokenizer's token embeddings (special tokens aside)."""
    W = input_embeddings(model).weight.detach()
    return float(norm_scale * W[allowed_tokens(model, tokenizer).to(W.device)].float().norm(dim=1).median())


def project(P: torch.Tensor, r: float) -> torch.Tensor:
    """Each row of ``P`` onto the L2 ball of radius ``r`` (in place; returns ``P``)."""
    with torch.no_grad():
        P.mul_((r / P.norm(dim=1, keepdim=True).clamp(min=1e-12)).clamp(max=1.0))
    return P


def optimise(model, items: Sequence[Item], P: torch.Tensor, r: float, steps: int, lr: float,
             pad: int) -> tuple[torch.Tensor, list[float], list[float]]:
    """Adam on ``P`` (m, d) for ``steps`` full-batch steps, each projected onto the ball (module docstring).
    Returns P, the loss before each step and after the last (``steps + 1`` values), and the largest row norm
    after each step. No gradient reaches the model's parameters."""
    P = project(P.detach().clone(), r).requires_grad_(True)
    opt = torch.optim.Adam([P], lr=lr)
    losses, norms = [], []
    with eval_mode(model):
        for _ in range(steps):
            loss = inserted_terms(model, items, P, pad)[0].mean()
            P.grad, = torch.autograd.grad(loss, [P])  # the model's own gradients are left alone
            opt.step()
            project(P, r)
            losses.append(float(loss.detach()))
            norms.append(float(P.detach().norm(dim=1).max()))
        with torch.no_grad():
            losses.append(float(inserted_terms(model, items, P, pad)[0].mean()))
    return P.detach(), losses, norms


@torch.no_grad()
def hits(model, items: Sequence[Item], P: torch.Tensor, pad: int) -> torch.Tensor:
    """(N,) whether each item's answer tokens are all greedy with ``P`` before the question (none: ``m =
    0``)."""
    with eval_mode(model):
        return inserted_terms(model, items, P, pad)[1]


def soft_prompt_attack(model, tokenizer, task: Task, cfg: SoftPromptConfig | None = None) -> dict:
    """Train a soft prompt on each fold's A, score it on its B (module docstring); ``model`` is untouched."""
    cfg = cfg or SoftPromptConfig()
    folds = task.forget_folds(cfg.seed)
    if folds is None:
        raise DataError(f"task {task.name!r}: the soft-prompt attack needs at least 3 forget QA facts")
    folds = folds[:cfg.folds]
    pad = pad_id(tokenizer)
    r = radius(model, tokenizer, cfg.norm_scale)
    W = input_embeddings(model).weight
    ok = allowed_tokens(model, tokenizer).nonzero()[:, 0]
    gen = torch.Generator().manual_seed(cfg.seed)
    requires = {n: p.requires_grad for n, p in model.named_parameters()}
    cost = Cost()
    acc, acc0, start, end, top, sizes = [], [], [], [], 0.0, []
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        with counting(model, cost=cost):
            for a, _, b in folds:
                train = suffix_items(task, tokenizer, list(a)[:cfg.max_items], "prefix")
                test = suffix_items(task, tokenizer, list(b)[:cfg.max_items], "prefix")
                sizes.append(len(test))
                init = W.detach()[ok[torch.randint(len(ok), (cfg.m,), generator=gen)].to(W.device)].float()
                P, losses, norms = optimise(model, train, init, r, cfg.steps, cfg.lr, pad)
                start.append(losses[0])
                end.append(losses[-1])
                top = max([top, *norms])
                acc.append(float(hits(model, test, P, pad).float().mean()))
                acc0.append(float(hits(model, test, P[:0], pad).float().mean()))
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(requires[n])
            p.grad = None
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"soft_prompt_acc": mean(acc), "soft_prompt_start_acc": mean(acc0),
            "soft_prompt_train_loss_start": mean(start), "soft_prompt_train_loss": mean(end),
            "soft_prompt_radius": r, "soft_prompt_max_norm": top,
            **read_counts("soft_prompt", effective_items(sizes)),
            "soft_prompt_budget": {**asdict(cfg), "folds": len(folds), "steps_x_m": cfg.steps * cfg.m},
            "soft_prompt_cost": cost.as_dict()}


@register_attack("soft_prompt", needs="at least 3 forget QA pairs to split into the attacker's folds",
                 applies=lambda task: task.forget_folds() is not None, config=SoftPromptConfig,
                 reads=AttackRead("soft_prompt_start_acc", "soft_prompt_acc",
                                  label="optimised embeddings before the question, held-out fold scored"))
def soft_prompt_run(r: AttackRun, cfg: SoftPromptConfig) -> dict:
    return soft_prompt_attack(r.model, r.tokenizer, r.task, cfg)
