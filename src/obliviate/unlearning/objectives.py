"""Shared maths of the unlearning objectives, as functions over tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from obliviate.losses import (IGNORE_INDEX, at_least_float32, kl_to_reference, labelled_logits, ratio_of_sums,
                              shift_targets, token_nll)


def forward_logits(model, batch: dict) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def labelled_logprobs(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(y_t), row)`` of every labelled target token of ``batch``: two (N,) tensors.

    The output projection runs only at the N positions that predict a labelled token
    (:func:`~obliviate.models.layers.logits_at`), never on B x T x V logits: answer tokens of QA
    pairs, unmasked document tokens. On a 128k vocabulary that is the largest activation by far.
    """
    logits, targets, positions = labelled_logits(model, batch)  # (N, V), (N,), (B, T)
    logp = -F.cross_entropy(at_least_float32(logits), targets, reduction="none")
    return logp, positions.nonzero()[:, 0]


def sequence_logprob(model, batch: dict) -> torch.Tensor:
    """log pi(y|x) per sequence, (B,), equal to ``answer_logprob(forward_logits(model, batch), labels)`` with
    logits only at the labelled positions (:func:`labelled_logprobs`)."""
    logp, rows = labelled_logprobs(model, batch)
    return torch.zeros(batch["labels"].shape[0], dtype=logp.dtype,
                       device=logp.device).index_add(0, rows, logp)


def token_logprobs(model, batch: dict) -> torch.Tensor:
    """log p(y_t) of every labelled target token, (B, T-1) in the layout of
    :func:`~obliviate.losses.token_nll` (position t predicts ``labels[t+1]``), zero elsewhere; logits only at
    the labelled positions."""
    logp, _ = labelled_logprobs(model, batch)
    labelled = shift_targets(batch["labels"]) != IGNORE_INDEX
    return torch.zeros(labelled.shape, dtype=logp.dtype, device=logp.device).masked_scatter(labelled, logp)


def sequence_mean_nll(model, batch: dict) -> torch.Tensor:
    """Each sequence's mean labelled-token NLL, (B,) (0 for a row without labelled tokens), with logits only
    at the labelled positions."""
    logp, rows = labelled_logprobs(model, batch)
    B = batch["labels"].shape[0]
    total = torch.zeros(B, dtype=logp.dtype, device=logp.device).index_add(0, rows, -logp)
    count = torch.zeros(B, dtype=logp.dtype, device=logp.device).index_add(0, rows, torch.ones_like(logp))
    return total / count.clamp(min=1)


def mean_labelled_nll(model, batch: dict) -> torch.Tensor:
    """Mean labelled-token NLL over the batch (a scalar), with logits only at the labelled positions."""
    logp, _ = labelled_logprobs(model, batch)
    return ratio_of_sums(-logp.sum(), torch.tensor(float(logp.numel()), device=logp.device))


def answer_logprob(logits: torch.Tensor, labels: torch.Tensor,
                   weights: torch.Tensor | None = None) -> torch.Tensor:
    """log pi(y|x) = sum over labelled tokens of log p(y_t): (B,). Optional per-token weights (B, T-1)."""
    nll, mask = token_nll(logits, labels)
    if weights is not None:
        nll = nll * weights
    return -nll.sum(-1)


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
    if kind == "nll":
        return mean_labelled_nll(model, batch)
    if kind == "kl":
        return kl_to_reference(forward_logits(model, batch), ref.logits(batch), batch["labels"])
    raise ValueError(f"unknown retain loss {kind!r}")


def random_unit_vector(d: int, seed: int, device=None) -> torch.Tensor:
    """u = r / ||r||, r ~ U[0, 1)^d from a seeded generator (RMU's control vector)."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(d, generator=g)
    return (r / r.norm()).to(device)


def forget_and_retain(forget: torch.Tensor, model, batch: dict, ref, cfg) -> dict:
    """The usual objective ``gamma * L_forget + alpha * L_retain`` as named terms.

    ``cfg`` has ``gamma``, ``alpha`` and ``retain`` ("nll" or "kl"); the retain
    term is left out when ``alpha`` is 0.
    """
    return add_retain({"forget": cfg.gamma * forget}, model, batch, ref, cfg)


def preference_loss(model, batch: dict, ref, cfg) -> dict:
    """DPO of ``batch["idk"]`` (the preferred answers: refusals, chosen answers or alternates) over
    ``batch["forget"]`` (:func:`dpo_loss` at ``cfg.beta``), + the retain term: IdkDPO, DPO and AltPO."""
    f, w = batch["forget"], batch["idk"]
    lp_l, lp_w = sequence_logprob(model, f), sequence_logprob(model, w)
    lp_l_ref, lp_w_ref = ref.answer_logprob(f, "forget"), ref.answer_logprob(w, "idk")
    return forget_and_retain(dpo_loss(lp_w, lp_w_ref, lp_l, lp_l_ref, cfg.beta), model, batch, ref, cfg)


def add_retain(terms: dict, model, batch: dict, ref, cfg) -> dict:
    """Add ``alpha * L_retain`` (``cfg.retain``: "nll" or "kl") to ``terms`` unless ``cfg.alpha`` is 0."""
    if cfg.alpha:
        terms["retain"] = cfg.alpha * retain_term(model, batch["retain"], ref, cfg.retain)
    return terms


def trained_params(model) -> list[torch.Tensor]:
    """The parameters the training loop updates (``requires_grad``), in ``model.parameters()`` order."""
    return [p for p in model.parameters() if p.requires_grad]


def param_grads(loss: torch.Tensor, params: list[torch.Tensor], retain_graph: bool = False) -> list[torch.Tensor]:
    """d loss / d p for each of ``params`` (zeros where the loss does not reach one), without touching ``.grad``."""
    g = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=retain_graph)
    return [torch.zeros_like(p) if x is None else x for p, x in zip(params, g)]


def gradient_term(params: list[torch.Tensor], grads: list[torch.Tensor], value: torch.Tensor) -> torch.Tensor:
    """A scalar whose value is ``value`` and whose gradient with respect to ``params`` is ``grads``: how a
    method that computes its gradient itself (at perturbed or adapted weights: SAM, TAR) hands it to the
    training loop, which backpropagates the terms it is given (first-order: the gradient is applied to the
    current weights)."""
    dot = sum((p * g.detach().to(p.dtype)).sum() for p, g in zip(params, grads))
    return dot - dot.detach() + value.detach()
