"""JensUn: unlearning with the Jensen-Shannon divergence (Singh et al. 2025, "Unlearning That Lasts:
Utility-Preserving, Robust, and almost Irreversible Forgetting in LLMs"; code:
github.com/nmndeep/JensUn-Unlearning).

    L = lambda_F * mean_t JSD(p_theta(. | x_f, r_<t) || e_{r_t})   on the forget questions x_f answered with a refusal r
      + lambda_R * mean_t JSD(p_theta(. | x_r, y_<t) || p_theta0(. | x_r, y_<t))   on the retain answers

with JSD(p || q) = 1/2 KL(p || m) + 1/2 KL(q || m), m = (p + q) / 2, in nats (bounded by log 2), and e_r the
one-hot distribution on the refusal's next token.

Details: docs/methods.md, "jensun" under "Method details".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.losses import at_least_float32, labelled_logits, ratio_of_sums
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import labelled_logprobs, mean_labelled_nll

LOG2 = math.log(2.0)


def jsd_to_onehot(logp_target: torch.Tensor) -> torch.Tensor:
    """JSD(p || e_y) per row from log p(y) (N,): the closed form of docs/methods.md, "jensun"."""
    logp_target = at_least_float32(logp_target)
    p = logp_target.exp()
    return 0.5 * ((1 - p) * LOG2 + p * (LOG2 + logp_target - torch.log1p(p)) + LOG2 - torch.log1p(p))


def jsd(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """JSD(p || q) per row of two (N, V) logit tensors, p = softmax(logits), q = softmax(ref_logits)."""
    logp, logq = F.log_softmax(at_least_float32(logits), -1), F.log_softmax(at_least_float32(ref_logits), -1)
    logm = torch.logsumexp(torch.stack([logp, logq]), 0) - LOG2
    return 0.5 * ((logp.exp() * (logp - logm)).sum(-1) + (logq.exp() * (logq - logm)).sum(-1))


def _mean(x: torch.Tensor) -> torch.Tensor:
    return ratio_of_sums(x.sum(), torch.tensor(float(x.numel()), device=x.device))


@dataclass
class JensUnConfig:
    gamma: float = 1.0
    """lambda_F: weight of the forget term, JSD to the one-hot refusal."""
    alpha: float = 1.0
    """lambda_R: weight of the retain term."""
    retain: Literal["jsd", "nll"] = "jsd"
    """Retain term: JSD to the frozen model (the paper's), or NLL."""

    def __post_init__(self):
        check_ranges(self, positive=("gamma",), nonnegative=("alpha",))


@register("jensun", paper=("Singh et al. 2025, Unlearning That Lasts (JensUn); "
                           "github.com/nmndeep/JensUn-Unlearning"),
          equation="λ_F · JSD(p_θ ‖ one-hot refusal) on forget questions + λ_R · JSD(p_θ ‖ p_θ0) on retain",
          presets={"tiny": {"lr": 1e-3, "steps": 50}, "paper": {"lr": 1e-5, "steps": 125}},
          search=weighted_search("alpha"))
class JensUn(Method):
    config_cls = JensUnConfig
    needs_idk = True
    needs_reference = True  # with the JSD retain term (the default); __init__ says for the config
    scaling = ("size class tiny/paper; λ_F, λ_R: divergences in nats bounded by log 2, not scaled; lr: × the "
               "fine-tuning run's lr over its preset's; steps fixed")

    def __init__(self, cfg: JensUnConfig):
        super().__init__(cfg)
        self.needs_reference = cfg.retain == "jsd" and cfg.alpha > 0

    def cached_logit_keys(self) -> tuple[str, ...]:
        return ("retain",)

    def loss(self, model, batch, ref) -> dict:
        logp, _ = labelled_logprobs(model, batch["idk"])
        terms = {"forget": self.cfg.gamma * _mean(jsd_to_onehot(logp))}
        if self.cfg.alpha:
            r = batch["retain"]
            if self.cfg.retain == "nll":
                retain = mean_labelled_nll(model, r)
            else:
                retain = _mean(jsd(labelled_logits(model, r)[0], ref.labelled_logits(r, "retain")))
            terms["retain"] = self.cfg.alpha * retain
        return terms
