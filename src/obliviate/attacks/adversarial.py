"""Adversarial fine-tuning: train on the forget domain's text and count the tokens until its loss is back.

The attack of token-level pretraining filtering (docs/methods.md, seed 004): a model that never learnt
a domain, or unlearnt it, is fine-tuned on that domain's text with AdamW (betas 0.9/0.95, weight decay
0.01, clip 0.5, a constant learning rate) through the one training loop, and a held-out loss is read
every ``eval_every`` steps. :func:`obliviate.filtering.tokens_to_recover` then reads off the curve how
many fine-tuning tokens bring that loss down to a target (the unfiltered model's).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from obliviate.data import collate
from obliviate.errors import DataError
from obliviate.losses import lm_loss
from obliviate.train import StepSampler, TrainConfig, train


def loss_recovery_curve(model, seqs: Sequence[np.ndarray], held_loss: Callable[[object], float], *,
                        steps: int,
                        lr: float, batch_size: int, eval_every: int, pad_id: int, seed: int = 0,
                        progress: bool = False, desc: str = "adversarial") -> dict:
    """Fine-tune ``model`` in place on ``seqs`` (token-id arrays) for ``steps`` steps; ``held_loss(model)``
    at step 0, every ``eval_every`` steps and at the end.

    Returns ``{"curve": [(tokens seen, held-out loss), ...], "budget_tokens": tokens of all steps}``; tokens
    count every token of the sampled sequences.
    """
    if not seqs:
        raise DataError("adversarial fine-tuning: no text to fine-tune on")
    sampler = StepSampler(len(seqs), batch_size, seed)
    cum = np.concatenate([[0], np.cumsum(sampler.step_tokens([len(s) for s in seqs], steps))])

    def batch_fn(step):
        return collate([seqs[i] for i in sampler(step)], pad_id)

    def eval_fn(m, step):
        return {"held_loss": held_loss(m), "tokens": int(cum[step])}

    tc = TrainConfig(steps=steps, lr=lr, beta1=0.9, beta2=0.95, weight_decay=0.01, grad_clip=0.5,
                     schedule="constant", warmup_steps=0, log_every=eval_every, progress=progress, desc=desc)
    summary = train(model, lambda m, b, s: {"lm": lm_loss(m, b)}, batch_fn, tc, None, eval_fn=eval_fn,
                    eval_every=eval_every, resume=False)
    curve = [(r["tokens"], r["held_loss"]) for r in summary["history"] if "held_loss" in r]
    return {"curve": curve, "budget_tokens": int(cum[-1])}
