"""TAR: Tamper-Attack Resistance (Tamirisa et al. 2024, "Tamper-Resistant Safeguards for Open-Weight LLMs",
arXiv:2408.00761, ICLR 2025; code: github.com/rishub-tamirisa/tamper-resistance, ``tar_training_loop`` in
modules/training.py, 0392cbb).

First-order meta-learning against simulated fine-tuning attacks. Each outer step, for each of ``attacks``
sampled adversaries a (learning rate lr_a from ``attack_lrs``, data: the forget batch with probability
``forget_attack_share``, else the retain batch, i.e. a benign fine-tune):

    theta_a,0 = theta;  theta_a,k = AdamW step at lr_a on NLL(attack data; theta_a,k-1),  k = 1..K
    g_TR = lambda_TR / (attacks * K) * sum_a sum_k grad L_TR(x_f; theta_a,k)        (evaluated at the adapted weights)
    update direction = g_TR + alpha * grad L_retain(x_r; theta)                      (applied at theta)

with L_TR = -mean_t H(p_theta(. | x_f, y_<t)) over the forget answer positions (the adapted model's negative
entropy).

Details: docs/methods.md, "tar" under "Method details".
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.errors import ConfigError
from obliviate.losses import at_least_float32, labelled_logits, ratio_of_sums
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import gradient_term, mean_labelled_nll, param_grads, trained_params


def negative_entropy(model, batch: dict) -> torch.Tensor:
    """-mean over the labelled positions of batch of the entropy of p_theta(. | prefix) (nats)."""
    logits, _, _ = labelled_logits(model, batch)
    return negative_entropy_of(logits)


def negative_entropy_of(logits: torch.Tensor) -> torch.Tensor:
    """-mean over the N rows of ``logits`` (N, V) of the entropy of softmax(row) (nats)."""
    logp = F.log_softmax(at_least_float32(logits), -1)
    h = -(logp.exp() * logp).sum(-1)
    return -ratio_of_sums(h.sum(), torch.tensor(float(h.numel()), device=h.device))


@dataclass
class TARConfig:
    lam_tr: float = 4.0
    """lambda_TR: weight of the tamper-resistance gradient."""
    alpha: float = 1.0
    """Weight of the retain NLL."""
    inner_steps: int = 4
    """K: the simulated attack's AdamW steps."""
    attacks: int = 3
    """Simulated attacks sampled per outer step."""
    attack_lrs: list[float] = field(default_factory=lambda: [2e-5, 4e-5, 1e-4])
    """The attack's learning rate, drawn uniformly from these."""
    forget_attack_share: float = 0.65
    """Probability that an attack fine-tunes on the forget batch (else on the retain batch)."""
    seed: int = 0
    """Seed of the attack sampling (outer step t draws from seed + t)."""

    def __post_init__(self):
        check_ranges(self, nonnegative=("lam_tr", "alpha"), positive=("attack_lrs",),
                     at_least_one=("inner_steps", "attacks"), fraction=("forget_attack_share",))
        if not self.attack_lrs:
            raise ConfigError("config key 'attack_lrs': give at least one learning rate")


@register("tar", paper=("Tamirisa et al. 2024, Tamper-Resistant Safeguards for Open-Weight LLMs (ICLR 2025, "
                        "arXiv:2408.00761; github.com/rishub-tamirisa/tamper-resistance)"),
          equation=("λ_TR · mean over sampled attacks and inner steps of ∇(−entropy on forget) at the "
                    "attacked weights (first-order) + α · retain NLL"),
          presets={"tiny": {"lr": 1e-3, "steps": 50,
                            "params": {"attacks": 1, "attack_lrs": [1e-4, 3e-4, 1e-3]}},
                   "paper": {"lr": 2e-5, "steps": 125}},
          search=weighted_search("alpha"))
class TAR(Method):
    config_cls = TARConfig
    counts_calls = True
    multiprocess_unsupported = "the simulated attacks run on this process's parameters only"
    sharding_unsupported = "the simulated attacks update and restore whole parameters in place"
    scaling = ("size class tiny/paper; λ_TR, α: nats, not scaled; attack lrs: chosen per size class; lr: × "
               "the fine-tuning run's lr over its preset's; steps fixed")

    def sample_attacks(self, step: int) -> list[tuple[float, str]]:
        """The step's attacks: ``(lr, "forget" | "retain")`` each, from a generator seeded with seed +
        step."""
        rng = random.Random(self.cfg.seed + step)
        return [(rng.choice(self.cfg.attack_lrs),
                 "forget" if rng.random() < self.cfg.forget_attack_share else "retain")
                for _ in range(self.cfg.attacks)]

    def loss(self, model, batch, ref) -> dict:
        cfg, params = self.cfg, trained_params(model)
        attacks = self.sample_attacks(self.calls)
        self.calls += 1
        saved = [p.detach().clone() for p in params]
        total = [torch.zeros_like(p) for p in params]
        value = torch.zeros((), device=saved[0].device)
        weight = cfg.lam_tr / (cfg.attacks * cfg.inner_steps)
        try:
            for lr, data in attacks:
                opt = torch.optim.AdamW(params, lr=lr)
                for _ in range(cfg.inner_steps):
                    for p, g in zip(params, param_grads(mean_labelled_nll(model, batch[data]), params)):
                        p.grad = g
                    opt.step()
                    tr = negative_entropy(model, batch["forget"])
                    for acc, g in zip(total, param_grads(tr, params)):
                        acc.add_(g, alpha=weight)
                    value = value + weight * tr.detach()
                del opt
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved):
                    p.copy_(s)
                    p.grad = None
        terms = {"tamper": gradient_term(params, total, value)}
        if cfg.alpha:
            terms["retain"] = cfg.alpha * mean_labelled_nll(model, batch["retain"])
        return terms
