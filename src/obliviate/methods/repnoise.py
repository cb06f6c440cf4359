"""RepNoise: Representation Noising (Rosati et al. 2024, NeurIPS, "Representation Noising: A Defence Mechanism
Against Harmful Finetuning", arXiv:2405.14577; code: github.com/domenicrosati/representation-noising).

    L = L_retain(theta) - alpha * L_forget(theta) + beta * sum_l MMD^2(h_l(x_f), z_l),   z_l ~ N(0, I)

L_retain / L_forget = mean NLL of the retain / forget answers (``ascent="log"``: log(1 + the forget NLL), as
the authors' code bounds it), h_l(x_f) = the output of decoder layer l on the forget sequences, and MMD^2 the
biased estimate with a Gaussian multi-kernel.

Details: docs/methods.md, "repnoise" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from obliviate.config import check_ranges
from obliviate.losses import at_least_float32
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import mean_labelled_nll
from obliviate.models.layers import capture_hidden, num_layers

KERNELS, KERNEL_MUL = 5, 2.0


def mmd_gaussian(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Biased MMD^2 between the rows of ``x`` and ``y`` (n, D) with the multi-bandwidth Gaussian kernel
    above."""
    total = at_least_float32(torch.cat([x, y]))
    sq = (total * total).sum(1)
    # no sqrt: a finite gradient at distance 0
    d2 = (sq[:, None] + sq[None, :] - 2 * total @ total.T).clamp(min=0)
    n = total.shape[0]
    s = d2.detach().sum() / (n * n - n) / KERNEL_MUL ** (KERNELS // 2)
    k = sum(torch.exp(-d2 / (s * KERNEL_MUL ** i)) for i in range(KERNELS))
    b = x.shape[0]
    return k[:b, :b].mean() + k[b:, b:].mean() - k[:b, b:].mean() - k[b:, :b].mean()


def noise_like(states: dict[int, torch.Tensor], seed: int) -> dict[int, torch.Tensor]:
    """N(0, I) samples shaped as each layer's states, drawn in layer order from a generator seeded with
    ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return {l: torch.randn(h.shape, generator=g, dtype=torch.float32).to(h.device) for l,
            h in sorted(states.items())}


@dataclass
class RepNoiseConfig:
    alpha: float = 1.0
    """Weight of the forget ascent term."""
    beta: float = 0.001
    """Weight of the noise term sum_l MMD^2(h_l(forget), N(0, I))."""
    ascent: Literal["nll", "log"] = "nll"
    """Forget term: -alpha * NLL (the paper's equation) or -alpha * log(1 + NLL) (the authors' code)."""
    seed: int = 0
    """Seed of the Gaussian samples (step t draws from seed + t)."""

    def __post_init__(self):
        check_ranges(self, nonnegative=("alpha", "beta"))


@register("repnoise", paper=("Rosati et al. 2024, Representation Noising (NeurIPS 2024, arXiv:2405.14577; "
                             "github.com/domenicrosati/representation-noising)"),
          equation="retain NLL − α · forget NLL + β · Σ_layers MMD²(h_l(forget), N(0, I))",
          presets={"tiny": {"lr": 1e-3, "steps": 50, "params": {"beta": 1.0}},
                   "paper": {"lr": 2e-5, "steps": 125, "params": {"alpha": 1.0, "beta": 0.001}}},
          search=weighted_search("alpha"))
class RepNoise(Method):
    config_cls = RepNoiseConfig
    counts_calls = True
    scaling = ("size class tiny/paper; α: log-probabilities, not scaled; β: MMD² is bounded (kernel values "
               "in [0, 5]) whatever the width, not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed")

    def loss(self, model, batch, ref) -> dict:
        f = batch["forget"]
        with capture_hidden(model, range(num_layers(model))) as states:
            nll_f = mean_labelled_nll(model, f)
        noise = noise_like(states, self.cfg.seed + self.calls)
        self.calls += 1
        keep = f["attention_mask"].unsqueeze(-1).float()
        mmd = sum(mmd_gaussian((at_least_float32(h) * keep).flatten(1), (noise[l] * keep).flatten(1))
                  for l, h in states.items())
        ascent = nll_f if self.cfg.ascent == "nll" else torch.log1p(nll_f)
        return {"retain": mean_labelled_nll(model, batch["retain"]), "forget": -self.cfg.alpha * ascent,
                "noise": self.cfg.beta * mmd}
