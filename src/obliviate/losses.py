"""Shared loss maths as plain functions over tensors.

Every objective in :mod:`obliviate.methods` and every training run in
:mod:`obliviate.train` is assembled from these. Shapes are given in trailing
comments: B = batch, T = sequence length, V = vocabulary.

Batches are dicts with ``input_ids`` (B, T), ``attention_mask`` (B, T) and
``labels`` (B, T), where ``labels[b, t]`` is the target *at position t* in the
Hugging Face convention (the model shifts internally): ``-100`` means "no loss
here". An optional ``loss_weights`` (B, T) float tensor, aligned with
``labels``, weights each target token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def shift_targets(labels: torch.Tensor) -> torch.Tensor:
    """Targets aligned with logits: position t predicts labels[t + 1]."""
    return labels[:, 1:]  # (B, T-1)


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negative log-likelihood and validity mask.

    logits (B, T, V), labels (B, T) -> nll (B, T-1), mask (B, T-1) bool.
    ``nll[b, t]`` = -log p(labels[b, t+1] | x_{<=t}); zero where masked.
    """
    logits = logits[:, :-1].float()  # (B, T-1, V)
    targets = shift_targets(labels)  # (B, T-1)
    mask = targets != IGNORE_INDEX
    safe = targets.clamp(min=0)
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), safe.reshape(-1), reduction="none")
    nll = nll.view_as(safe) * mask
    return nll, mask


def masked_mean(values: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` (optionally times ``weights``).

    The denominator is the (weighted) count of unmasked positions, so masked
    tokens neither contribute loss nor dilute the mean.
    """
    w = mask.to(values.dtype)
    if weights is not None:
        w = w * weights.to(values.dtype)
    return (values * w).sum() / w.sum().clamp(min=1e-8)


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
    from obliviate.models.layers import logits_at

    targets = shift_targets(batch["labels"])  # (B, T-1)
    keep = F.pad(targets != IGNORE_INDEX, (0, 1))  # (B, T): position t predicts labels[t+1]
    logits = logits_at(model, batch["input_ids"], batch["attention_mask"], keep)  # (N, V)
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float(), targets[targets != IGNORE_INDEX])


def kl_to_reference(logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean over labelled positions of KL(p_ref || p_theta) on next-token distributions."""
    mask = shift_targets(labels) != IGNORE_INDEX
    logp = F.log_softmax(logits[:, :-1].float(), -1)
    logq = F.log_softmax(ref_logits[:, :-1].float(), -1)
    kl = (logq.exp() * (logq - logp)).sum(-1)  # (B, T-1)
    return masked_mean(kl, mask)


def hidden_mse(h: torch.Tensor, target: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error over (valid tokens x hidden dim); padding masked if a mask is given."""
    sq = (h.float() - target.float()).pow(2).mean(-1)  # (B, T)
    if attention_mask is None:
        return sq.mean()
    return masked_mean(sq, attention_mask.bool())
