"""ATWU's learned token weights: the scorer, the SATGA+ token loss and the w-step.

Shared by every ATWU method in :mod:`obliviate.methods.atwu` (a reconstruction from the seed paper's
summary, not the authors' code). Prose, ``position`` and why the w-step never touches the model:
docs/methods.md#machinery-shared-by-several-methods. Everything is ``(B, T-1)``, aligned with
:func:`obliviate.losses.token_nll`. Scorer, with w = 0 and b = logit(rho) at initialisation::

    z_t = sigmoid(<w, sg(h(x)_t)> + b)

SATGA+ per-token forget term, with p_t = p(y_t | y_<t, x) and CE_t = -log p_t::

    l_t = -s_t * CE_t,   s_t = z_t * sg(p_t) ** e(z_t)
    e(z) = beta * (1 - z)   ("beta_one_minus_z", the default)
         = beta * z         ("beta_z")
         = beta             ("beta"; with z = 1 this is WGA with exponent beta)

w-step (theta frozen; H_b the binary entropy, means over the batch's forget-answer tokens)::

    lam * mean_t l_t + tau * mean_t H_b(z_t) + mu * (mean_t z_t - rho) ** 2
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from obliviate.config import check_ranges
from obliviate.errors import ConfigError
from obliviate.losses import masked_mean, token_nll
from obliviate.unlearning.contract import Method

EXPONENT_MAPS = ("beta_one_minus_z", "beta_z", "beta")


PAPER = "Yuce, Nikolaou, Flammarion 2026, ATWU (reconstruction)"
"""The source of every ATWU method (``register(paper=...)``)."""

@dataclass
class ScorerConfig:
    """Token scorer and w-step settings, shared by all ATWU methods (docs/methods.md)."""

    sat_beta: float = 5.0
    """beta of SATGA+ (the saturation exponent scale)."""
    exponent: Literal["beta_one_minus_z", "beta_z", "beta"] = "beta_one_minus_z"
    """Exponent map e(z) of SATGA+: beta*(1-z), beta*z or beta (the last with z = 1 is WGA)."""
    rho: float = 0.3
    """Token budget: target mean score; b starts at logit(rho)."""
    tau: float = 0.05
    """Weight of the binary-entropy regulariser in the w-step."""
    mu: float = 10.0
    """Weight of the budget penalty (mean z - rho)^2 in the w-step."""
    lam: float = 1.0
    """lambda: weight of the SATGA+ term (in the w-step; for ATWU also in the theta-step)."""
    w_lr: float = 1e-3
    """Adam learning rate of the scorer (w, b)."""
    w_steps: int = 1
    """w-steps per theta-step (0 freezes the scorer at its initialisation)."""
    position: Literal["predict", "token"] = "predict"
    """Which hidden state scores target token y_t: the one predicting it, or y_t's own."""

    def __post_init__(self):
        if self.exponent not in EXPONENT_MAPS:
            raise ConfigError("config key 'exponent': must be one of "
                              f"{', '.join(EXPONENT_MAPS)}, got {self.exponent!r}")
        if not 0.0 < self.rho < 1.0:
            raise ConfigError(f"config key 'rho': must be in (0, 1), got {self.rho}")
        if self.w_steps < 0:
            raise ConfigError(f"config key 'w_steps': must be >= 0, got {self.w_steps}")
        if self.w_lr <= 0:
            raise ConfigError(f"config key 'w_lr': must be > 0, got {self.w_lr}")
        if self.position not in ("predict", "token"):
            raise ConfigError(f"config key 'position': must be 'predict' or 'token', got {self.position!r}")
        check_ranges(self, nonnegative=("sat_beta", "tau", "mu", "lam")
                     + tuple(k for k in ("alpha", "gamma") if hasattr(self, k)),
                     positive=tuple(k for k in ("beta",) if hasattr(self, k)))


# ---------------------------------------------------------------- maths

def exponent_of(z: torch.Tensor, beta: float, exponent: str) -> torch.Tensor:
    """e(z) of SATGA+ for the named exponent map."""
    if exponent == "beta_one_minus_z":
        return beta * (1.0 - z)
    if exponent == "beta_z":
        return beta * z
    if exponent == "beta":
        return torch.full_like(z, beta)
    raise ConfigError(f"unknown SATGA+ exponent map {exponent!r} (valid: {', '.join(EXPONENT_MAPS)})")


def satga_weights(z: torch.Tensor, nll: torch.Tensor, beta: float, exponent: str) -> torch.Tensor:
    """s_t = z_t * sg(p_t) ** e(z_t), computed as z * exp(-e * sg(CE)) (finite even where p_t underflows)."""
    return z * torch.exp(-exponent_of(z, beta, exponent) * nll.detach())


def satga_plus_loss(z: torch.Tensor, nll: torch.Tensor, mask: torch.Tensor, beta: float,
                    exponent: str) -> torch.Tensor:
    """mean_t l_t = -mean_t s_t * CE_t over masked tokens.

    Gradients flow through ``nll`` (theta-step, pass ``z`` detached) and through ``z``
    (w-step, pass ``nll`` detached); ``p_t`` inside ``s_t`` is always stop-gradient.
    """
    return -masked_mean(satga_weights(z, nll, beta, exponent) * nll, mask)


def binary_entropy(z: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """H_b(z) = -z log z - (1 - z) log(1 - z), in nats."""
    z = z.clamp(eps, 1.0 - eps)
    return -(z * torch.log(z) + (1.0 - z) * torch.log1p(-z))


def w_objective(z: torch.Tensor, nll: torch.Tensor, mask: torch.Tensor,
                cfg: ScorerConfig) -> dict[str, torch.Tensor]:
    """The w-step terms (already weighted): {"satga", "entropy", "budget"}; theta is treated as frozen."""
    nll = nll.detach()
    return {
        "satga": cfg.lam * satga_plus_loss(z, nll, mask, cfg.sat_beta, cfg.exponent),
        "entropy": cfg.tau * masked_mean(binary_entropy(z), mask),
        "budget": cfg.mu * (masked_mean(z, mask) - cfg.rho) ** 2,
    }


# ---------------------------------------------------------------- the scorer

def forward_with_features(model, batch: dict, position: str = "predict") -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: logits (B, T, V) with gradients, and the scorer's features (B, T-1, d), detached.

    The features are the final hidden state (after the final norm; the input of the LM head).
    """
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                output_hidden_states=True)
    h = out.hidden_states[-1].detach()  # (B, T, d)
    feats = h[:, :-1] if position == "predict" else h[:, 1:]  # (B, T-1, d)
    return out.logits, feats


class TokenScorer:
    """z = sigmoid(<w, h> + b) with its own Adam optimizer over (w, b).

    (w, b) are created on first use (the width and device come from the features).
    They are plain leaf tensors owned by this object, not model parameters. Their Adam step
    is not the training loop's: SATGA+ alternates it with the model's step *inside* one
    training step (the w-step reads the current model's hidden states, then theta steps on
    the weights it produced), so it is part of the method's loss, not a second run of the loop.
    """

    def __init__(self, cfg: ScorerConfig):
        self.cfg = cfg
        self.w: torch.Tensor | None = None
        self.b: torch.Tensor | None = None
        self.opt: torch.optim.Adam | None = None
        self.last: dict[str, float] = {}
        """Diagnostics of the last w-step: its terms and the mean score."""

    def init(self, d: int, device=None) -> None:
        self.w = torch.zeros(d, device=device, requires_grad=True)
        self.b = torch.tensor(math.log(self.cfg.rho / (1.0 - self.cfg.rho)), device=device,
                              requires_grad=True)
        self.opt = torch.optim.Adam([self.w, self.b], lr=self.cfg.w_lr)

    def _ensure(self, feats: torch.Tensor) -> None:
        if self.w is None:
            self.init(feats.size(-1), feats.device)

    def logits(self, feats: torch.Tensor) -> torch.Tensor:
        """<w, sg(h)> + b: (B, T-1)."""
        self._ensure(feats)
        return feats.detach().float() @ self.w + self.b

    def scores(self, feats: torch.Tensor) -> torch.Tensor:
        """z (B, T-1), detached."""
        with torch.no_grad():
            return torch.sigmoid(self.logits(feats))

    def w_step(self, feats: torch.Tensor, nll: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        """``cfg.w_steps`` Adam steps on the w-objective with theta frozen; returns the last terms."""
        self._ensure(feats)
        nll = nll.detach()
        for _ in range(self.cfg.w_steps):
            with torch.enable_grad():
                z = torch.sigmoid(self.logits(feats))
                terms = w_objective(z, nll, mask, self.cfg)
                total = sum(terms.values())
                gw, gb = torch.autograd.grad(total, [self.w, self.b])
            self.w.grad, self.b.grad = gw, gb
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.last = {**{f"w_{k}": float(v.detach()) for k, v in terms.items()},
                         "z_mean": float(masked_mean(z.detach(), mask))}
        return self.last

    def update_and_score(self, feats: torch.Tensor, nll: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The w-step(s), then the detached scores under the updated (w, b) for the theta-step."""
        self.w_step(feats, nll, mask)
        return self.scores(feats)

    def state_dict(self) -> dict:
        """Copies of w, b and the Adam state (None before first use)."""
        if self.w is None:
            return {"w": None, "b": None, "optimizer": None}
        return {"w": self.w.detach().clone(), "b": self.b.detach().clone(),
                "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("w") is None:
            self.w = self.b = self.opt = None
            return
        self.init(state["w"].numel(), state["w"].device)
        with torch.no_grad():
            self.w.copy_(state["w"])
            self.b.copy_(state["b"])
        if state.get("optimizer") is not None:
            self.opt.load_state_dict(state["optimizer"])


class ScoredMethod(Method):
    """What every ATWU method shares: its scorer, the forget forward pass, state and evaluation hooks."""

    multiprocess_unsupported = ("its token scorer (w, b) takes its own Adam steps on each process's rows of "
                                "the batch, so the processes' scorers would drift apart")
    """Why it cannot run in several processes (see obliviate.train.distributed.check_method)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.scorer = TokenScorer(cfg)

    def forget_pass(self, model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                       torch.Tensor]:
        """Forward the forget batch, run the w-step(s); returns logits, nll, mask and detached z (B, T-1)."""

        logits, feats = forward_with_features(model, batch, self.cfg.position)
        nll, mask = token_nll(logits, batch["labels"])
        z = self.scorer.update_and_score(feats, nll, mask)
        return logits, nll, mask, z

    def scorer_state(self) -> dict:
        """w, b and the scorer's Adam state (save it next to a checkpoint for exact resume)."""
        return self.scorer.state_dict()

    def load_scorer_state(self, state: dict) -> None:
        self.scorer.load_state_dict(state)

    @torch.no_grad()
    def token_scores(self, model, batch: dict) -> torch.Tensor:
        """Current scores z (B, T-1) of every target position of ``batch`` (no update)."""
        _, feats = forward_with_features(model, batch, self.cfg.position)
        return self.scorer.scores(feats)
