"""Hinge ascent: raise the forget answers' NLL up to a margin, keep the retain answers' NLL low.

    L = relu(m - NLL(forget answers)) + alpha * NLL(retain answers)

An example of a new method: copy this file into ``src/obliviate/methods/`` and it is registered,
listed by ``obliviate methods``, runnable with ``obliviate unlearn --method hinge_ascent``, checked
by the registry tests and shown in docs/methods.md after ``make docs``. It needs no other file.
"""

from dataclasses import dataclass

import torch

from obliviate.unlearning.contract import Method, register
from obliviate.unlearning.objectives import mean_labelled_nll


@dataclass
class HingeAscentConfig:
    margin: float = 8.0
    """NLL of the forget answers past which the forget term stops pushing (nats per token)."""
    alpha: float = 1.0
    """Weight of the retain NLL."""


@register("hinge_ascent", paper="an example method (examples/new-method)",
          equation="relu(m − NLL(forget answers)) + α · NLL(retain answers)",
          presets={"tiny": {"lr": 3e-4, "steps": 20}})
class HingeAscent(Method):
    config_cls = HingeAscentConfig
    needs_reference = False

    def trainable(self, model) -> list[str]:
        return ["*"]

    def loss(self, model, batch: dict, ref) -> dict[str, torch.Tensor]:
        forget = torch.relu(self.cfg.margin - mean_labelled_nll(model, batch["forget"]))
        return {"forget": forget, "retain": self.cfg.alpha * mean_labelled_nll(model, batch["retain"])}
