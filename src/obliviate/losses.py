"""Shared loss maths as plain functions over tensors: every objective in :mod:`obliviate.methods` and every
training run in :mod:`obliviate.train` is assembled from these. Shapes in trailing comments: B batch, T
length, V vocabulary.

Batches are dicts of ``input_ids``, ``attention_mask`` and ``labels`` (B, T), Hugging Face's convention (the
model shifts; ``-100``: no loss), with an optional ``loss_weights`` (B, T) per target token. Token means over
several processes (:func:`token_means_over_processes`; a process's value is its share): docs/distributed.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
_COUNT_MEAN: list[Callable[[torch.Tensor], torch.Tensor]] = []
"""While a loss of a split batch is computed: the mean over processes (one collective per call)."""


@contextlib.contextmanager
def token_means_over_processes(mean_over_processes: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Token means in the block weight the tokens of every process alike (see the module docstring)."""
    _COUNT_MEAN.append(mean_over_processes)
    try:
        yield
    finally:
        _COUNT_MEAN.pop()


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 where its dtype is narrower (float16, bfloat16, float8), else ``x`` itself: losses and
    scores are computed in float32 at least, and a float64 model's in float64 (``.float()`` would round it
    down)."""
    return x if x.is_floating_point() and torch.finfo(x.dtype).bits >= 32 else x.float()


def ratio_of_sums(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``total / count`` (count clamped at 1e-8); over processes, the count is the mean of every process's
    count."""
    if _COUNT_MEAN:
        count = _COUNT_MEAN[-1](count.detach().float().reshape(1)).reshape(()).to(count.dtype)
    return total / count.clamp(min=1e-8)


def soft_cross_entropy(target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """mean over the N rows of CE(target, softmax(logits)) = -sum_v q_v log p_v: ``target`` (N, V) a
    distribution per row (held fixed by the caller), ``logits`` (N, V). A zero target entry contributes 0 even
    where log p is -inf. The distillation term of UNDIAL and CE-U."""
    logp = F.log_softmax(at_least_float32(logits), -1)
    ce = -(target * logp.masked_fill(target == 0, 0.0)).sum(-1)  # (N,)
    return ratio_of_sums(ce.sum(), torch.tensor(float(len(ce)), device=ce.device))


def shift_targets(labels: torch.Tensor) -> torch.Tensor:
    """Targets aligned with logits: position t predicts labels[t + 1]."""
    return labels[:, 1:]  # (B, T-1)


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negative log-likelihood and validity mask.

    logits (B, T, V), labels (B, T) -> nll (B, T-1), mask (B, T-1) bool.
    ``nll[b, t]`` = -log p(labels[b, t+1] | x_{<=t}); zero where masked.
    """
    logits = at_least_float32(logits[:, :-1])  # (B, T-1, V)
    targets = shift_targets(labels)  # (B, T-1)
    mask = targets != IGNORE_INDEX
    safe = targets.clamp(min=0)
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), safe.reshape(-1), reduction="none")
    nll = nll.view_as(safe) * mask
    return nll, mask


def masked_mean(values: torch.Tensor, mask: torch.Tensor,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` (optionally times ``weights``).

    The denominator is the (weighted) count of unmasked positions, so masked
    tokens neither contribute loss nor dilute the mean.
    """
    w = mask.to(values.dtype)
    if weights is not None:
        w = w * weights.to(values.dtype)
    return ratio_of_sums((values * w).sum(), w.sum())


def lm_loss(model, batch: dict) -> torch.Tensor:
    """Mean next-token NLL over labelled tokens, honouring ``loss_weights``."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    nll, mask = token_nll(out.logits, batch["labels"])
    weights = batch.get("loss_weights")
    if weights is not None:
        weights = weights[:, 1:]
    return masked_mean(nll, mask, weights)


def lm_loss_labelled(model, batch: dict) -> torch.Tensor:
    """:func:`lm_loss` (no ``loss_weights``) computing logits only at labelled positions.

    Same value as :func:`lm_loss`; faster when many tokens carry no loss (prompts of QA
    pairs). See :func:`obliviate.models.layers.logits_at`.
    """
    return lm_loss_grouped(model, [batch])


def lm_loss_grouped(model, batches: list[dict]) -> torch.Tensor:
    """:func:`lm_loss_labelled` of one batch given as several (its rows grouped by length, each group cut to
    its longest row): the summed NLL of every labelled token over their count, so the same loss as one padded
    batch, with fewer padding positions computed."""
    total, count = None, 0
    for batch in batches:
        logits, targets, _ = labelled_logits(model, batch)
        nll = F.cross_entropy(at_least_float32(logits), targets, reduction="sum")
        total = nll if total is None else total + nll
        count += logits.shape[0]
    return ratio_of_sums(total, torch.tensor(float(count), device=total.device))


def labelled_logits(model, batch: dict,
                    keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits, targets, positions)``: the logits (N, V) at the N positions that predict a labelled token of
    ``batch`` (or only those of the (B, T-1) target mask ``keep``), those target tokens (N,), and the (B, T)
    mask of the positions, which reads the same rows of another model's (B, T, V) logits:
    ``other[positions]``. The unembedding runs at those positions only
    (:func:`~obliviate.models.layers.logits_at`)."""
    # here, not at the top: the import graph stays 13 levels deep
    from obliviate.models.layers import logits_at

    targets = shift_targets(batch["labels"])  # (B, T-1): position t predicts labels[t+1]
    labelled = targets != IGNORE_INDEX if keep is None else keep & (targets != IGNORE_INDEX)
    positions = F.pad(labelled, (0, 1))  # (B, T)
    logits = logits_at(model, batch["input_ids"], batch["attention_mask"], positions)  # (N, V)
    return logits, targets[labelled], positions


def kl_to_reference(logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean over labelled positions of KL(p_ref || p_theta) on next-token distributions."""
    mask = shift_targets(labels) != IGNORE_INDEX
    logp = F.log_softmax(at_least_float32(logits[:, :-1]), -1)
    logq = F.log_softmax(at_least_float32(ref_logits[:, :-1]), -1)
    kl = (logq.exp() * (logq - logp)).sum(-1)  # (B, T-1)
    return masked_mean(kl, mask)


def hidden_mse(h: torch.Tensor, target: torch.Tensor,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error over (valid tokens x hidden dim); padding masked if a mask is given."""
    sq = (at_least_float32(h) - at_least_float32(target)).pow(2).mean(-1)  # (B, T)
    if attention_mask is None:
        return sq.mean()
    return masked_mean(sq, attention_mask.bool())
