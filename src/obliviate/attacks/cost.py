"""What an attack spent: forward passes, backward passes and tokens, so attacker budgets can be compared.

:func:`counting` hooks decoder layer 0 (every forward pass of any Hugging Face causal LM goes through it,
whether it starts from token ids or from embeddings) and counts each pass and the tokens it processed
(batch x positions, padding included; a cached generation step counts its new tokens only). Backward passes
are counted on the last decoder layer: a forward pass whose output needs a gradient puts a hook on it, which
fires once per backward pass through it (relearning's and fine-tuning's steps, GCG's gradient with respect to
its one-hot tokens). A deep copy of a hooked model carries the hook, so
the passes of a copy made inside the block (a relearning attack's) are counted too. docs/evaluation.md,
section "More attacks".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from obliviate.models.layers import decoder_layers


@dataclass
class Cost:
    forwards: int = 0
    backwards: int = 0
    tokens: int = 0
    """Tokens through the forward passes (B x T per pass)."""

    def backward(self, n: int = 1) -> None:
        self.backwards += n

    def add(self, other: "Cost") -> "Cost":
        self.forwards += other.forwards
        self.backwards += other.backwards
        self.tokens += other.tokens
        return self

    def as_dict(self) -> dict:
        return asdict(self)


_ACTIVE: list[Cost] = []
"""The counters of the :func:`counting` blocks now open, innermost last."""


def resumable_cost_hooks() -> tuple:
    """``(get, set)`` state hooks for :func:`obliviate.train.loop.train`, so that an attack resumed from a
    checkpoint counts what it spent before the kill: ``get()`` is each open counter's growth since this call,
    saved with the checkpoint; ``set(d)`` adds it back to the open counters of the resumed run. Without them a
    resumed relearning attack reported only the steps after its checkpoint."""
    costs = list({id(c): c for c in _ACTIVE}.values())  # a counter opened twice is restored once
    start = [c.as_dict() for c in costs]

    def get() -> dict:
        return {"attack_cost": [{k: v - s[k] for k, v in c.as_dict().items()} for c, s in zip(costs, start)]}

    def put(d: dict) -> None:
        for c, saved in zip(costs, d.get("attack_cost", [])):
            c.add(Cost(**{k: int(v) for k, v in saved.items()}))

    return get, put


@contextlib.contextmanager
def counting(*models, cost: Cost | None = None) -> Iterator[Cost]:
    """Count the forward passes (and their tokens) of ``models`` inside the block; hooks removed on exit."""
    cost = cost if cost is not None else Cost()

    def hook(_mod, args, kwargs):
        h = args[0] if args else kwargs.get("hidden_states")
        cost.forwards += 1
        cost.tokens += int(h.shape[0] * h.shape[1]) if h is not None and h.dim() == 3 else 0

    def on_backward(_grad):
        cost.backwards += 1

    def out_hook(_mod, _args, output):
        h = output[0] if isinstance(output, (tuple, list)) else output
        if isinstance(h, torch.Tensor) and h.requires_grad:
            h.register_hook(on_backward)

    handles = []
    try:
        for m in models:
            if m is not None:
                layers = decoder_layers(m)
                handles.append(layers[0].register_forward_pre_hook(hook, with_kwargs=True))
                handles.append(layers[-1].register_forward_hook(out_hook))
        _ACTIVE.append(cost)
        yield cost
    finally:
        if _ACTIVE and _ACTIVE[-1] is cost:
            _ACTIVE.pop()
        for h in handles:
            h.remove()
