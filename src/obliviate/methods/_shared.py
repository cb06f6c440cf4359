"""Shared maths of the unlearning objectives, as functions over tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from obliviate.losses import kl_to_reference, masked_mean, token_nll


def forward_logits(model, batch: dict) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def answer_logprob(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """log pi(y|x) = sum over labelled tokens of log p(y_t): (B,). Optional per-token weights (B, T-1)."""
    nll, mask = token_nll(logits, labels)
    if weights is not None:
        nll = nll * weights
    return -nll.sum(-1)


def mean_answer_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean labelled-token NLL over the batch (a scalar)."""
    nll, mask = token_nll(logits, labels)
    return masked_mean(nll, mask)


def npo_loss(logp: torch.Tensor, logp_ref: torch.Tensor, beta: float) -> torch.Tensor:
    """NPO: -(2/beta) * mean log sigmoid(-beta * (log pi - log pi_ref))."""
    return -(2.0 / beta) * F.logsigmoid(-beta * (logp - logp_ref)).mean()


def simnpo_loss(nll_bar: torch.Tensor, beta: float, delta: float) -> torch.Tensor:
    """SimNPO: -(2/beta) * mean log sigmoid(beta * (NLL_bar - delta)), NLL_bar per sequence."""
    return -(2.0 / beta) * F.logsigmoid(beta * (nll_bar - delta)).mean()


def dpo_loss(logp_w: torch.Tensor, logp_w_ref: torch.Tensor, logp_l: torch.Tensor, logp_l_ref: torch.Tensor,
             beta: float) -> torch.Tensor:
    """DPO with the NPO scaling: -(2/beta) * mean log sigmoid(beta * ((w - w_ref) - (l - l_ref)))."""
    return -(2.0 / beta) * F.logsigmoid(beta * ((logp_w - logp_w_ref) - (logp_l - logp_l_ref))).mean()


def retain_term(model, batch: dict, ref, kind: str) -> torch.Tensor:
    """Retain loss: NLL on retain data, or KL(p_ref || p_theta) on its labelled positions."""
    logits = forward_logits(model, batch)
    if kind == "nll":
        return mean_answer_nll(logits, batch["labels"])
    if kind == "kl":
        return kl_to_reference(logits, ref.logits(batch), batch["labels"])
    raise ValueError(f"unknown retain loss {kind!r}")


def random_unit_vector(d: int, seed: int, device=None) -> torch.Tensor:
    """u = r / ||r||, r ~ U[0, 1)^d from a seeded generator (RMU's control vector)."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(d, generator=g)
    return (r / r.norm()).to(device)


def rmu_forget_loss(h: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """mean over (valid tokens, dims) of (h - target)^2; target broadcasts over (B, T)."""
    sq = (h.float() - target.float()).pow(2).mean(-1)  # (B, T)
    return sq.mean() if mask is None else masked_mean(sq, mask.bool())


def forget_and_retain(forget: torch.Tensor, model, batch: dict, ref, cfg) -> dict:
    """The usual objective ``gamma * L_forget + alpha * L_retain`` as named terms.

    ``cfg`` has ``gamma``, ``alpha`` and ``retain`` ("nll" or "kl"); the retain
    term is left out when ``alpha`` is 0.
    """
    return add_retain({"forget": cfg.gamma * forget}, model, batch, ref, cfg)


def add_retain(terms: dict, model, batch: dict, ref, cfg) -> dict:
    """Add ``alpha * L_retain`` (``cfg.retain``: "nll" or "kl") to ``terms`` unless ``cfg.alpha`` is 0."""
    if cfg.alpha:
        terms["retain"] = cfg.alpha * retain_term(model, batch["retain"], ref, cfg.retain)
    return terms
