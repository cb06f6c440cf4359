"""MUDMAN: Meta-Unlearning with Disruption Masking And Normalization (Sondej, Yang, Kniejski, Windys 2025,
"Robust LLM Unlearning with MUDMAN", arXiv:2506.12484; code: github.com/filyp/MUDMAN, ``src/MUDMAN.py`` and
``unlearn`` in ``src/unlearning.py``).

Each step t, with theta the trained weights and phi an adversary copy of them, forked (phi <- theta) every
``fork_every`` steps and relearning the forget set by plain SGD between forks:

    a_t = mu * a_{t-1} + (1 - mu) * grad L_retain(x_r; theta)                      (retain gradient, EMA)
    g   = grad L_u(x_f; phi)          phi <- decay * (phi - lr_adv * grad NLL(x_f; phi)) + (1 - decay) * theta
    m   = [sign(g) == sign(a_t)]                                                    (disruption mask)
    update direction = gamma * (m * g) / ||g||_2 + alpha * grad L_retain(x_r; theta)  (applied at theta)

L_u = -mean_t H(p(. | x_f, y_<t)) over the forget answer positions (``loss="neg_entropy"``, the authors'
MUDMAN.py default) or -NLL(x_f) (``"neg_nll"``, their ablations' loss); ||g||_2 is over every trained tensor
(global), taken before the mask, as in the authors' code. A masked-in entry is one where a descent step on L_u
also descends the retain loss, to first order: no update disrupts retention.

Reconstruction: the update goes through the run's AdamW, not the authors' hand-written SGD steps at
``unlearning_rate`` and ``retaining_rate`` (their ratio becomes gamma : alpha; the running mean a decides the mask
only). Defaults: the authors' MUDMAN.py (mu 0.9, adversary lr 1e-3 reset every 32 steps, gate projections).

Details: docs/methods.md, "mudman" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.errors import ConfigError, ModelError
from obliviate.losses import at_least_float32, labelled_logits, ratio_of_sums
from obliviate.methods.tar import negative_entropy_of
from obliviate.models.layers import WHATS, num_layers, param_names_for
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import gradient_term, mean_labelled_nll, param_grads, trained_params

UNLEARNING_LOSSES = ("neg_entropy", "neg_nll")
MODULES = ("mlp_in", *WHATS, "all")
"""What ``modules`` may name: ``mlp_in`` (each MLP's first projection: the gate of a gated MLP, else the
up-projection), the groups of :func:`~obliviate.models.layers.param_names_for`, or ``all``."""


def disruption_mask(unlearn: list[torch.Tensor], retain: list[torch.Tensor]) -> list[torch.Tensor]:
    """``unlearn`` with every entry zeroed whose sign differs from ``retain``'s at the same place (a zero retain
    entry keeps none): Disruption Masking, the update kept only where it also descends the retain loss."""
    return [g * (g.sign() == r.sign()) for g, r in zip(unlearn, retain)]


def global_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """||(g_1, ..., g_n)||_2, the L2 norm over every entry of every tensor."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(at_least_float32(g)) for g in grads]))


def scaled(grads: list[torch.Tensor], factor: torch.Tensor | float) -> list[torch.Tensor]:
    return [g * factor for g in grads]


def ema_(acc: list[torch.Tensor], new: list[torch.Tensor], momentum: float) -> None:
    """acc <- momentum * acc + (1 - momentum) * new, in place."""
    for a, g in zip(acc, new):
        a.mul_(momentum).add_(g, alpha=1 - momentum)


def like(params: list[torch.Tensor], tensors: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
    """``tensors`` on ``params``' devices and dtypes (state restored from a checkpoint is read onto the CPU)."""
    return None if tensors is None else [t.to(p.device, p.dtype) for p, t in zip(params, tensors)]


def forget_losses(logits: torch.Tensor, targets: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(NLL, L_u)`` of the forget answer tokens from their logits (N, V) and targets (N,): the adversary's
    relearning loss and the unlearning loss (``loss``: "neg_entropy" or "neg_nll")."""
    logits = at_least_float32(logits)
    nll = ratio_of_sums(F.cross_entropy(logits, targets, reduction="sum"),
                        torch.tensor(float(targets.numel()), device=logits.device))
    return nll, (-nll if loss == "neg_nll" else negative_entropy_of(logits))


@dataclass
class MUDMANConfig:
    loss: str = "neg_entropy"
    """L_u: "neg_entropy" (minus the entropy of the forget answers' next-token distributions, the authors'
    MUDMAN.py default) or "neg_nll" (minus their NLL)."""
    gamma: float = 1.0
    """Weight of the normalised, masked unlearning gradient (its norm before the mask, with ``normalize``)."""
    alpha: float = 1.0
    """Weight of the retain NLL's gradient."""
    retain_momentum: float = 0.9
    """mu: momentum of the retain gradient's running mean that the mask compares signs with."""
    mask: bool = True
    """Disruption Masking (False: the ablation without it)."""
    normalize: bool = True
    """Divide the unlearning gradient by its global L2 norm (False: the ablation without it)."""
    meta: bool = True
    """Take the unlearning gradient at the relearning adversary's weights (False: at theta, no adversary)."""
    adv_lr: float = 1e-3
    """The adversary's SGD learning rate on the forget NLL."""
    fork_every: int = 32
    """The adversary is reset to theta every this many steps."""
    adv_decay: float = 1.0
    """phi <- decay * phi + (1 - decay) * theta after each adversary step (1: no decay)."""
    modules: list[str] = field(default_factory=lambda: ["mlp_in"])
    """Which weights it trains, in every layer: ``mlp_in`` (the MLP's gate projection, the authors'
    ``gate_proj``; the up-projection of an ungated MLP, as their Pythia runs' ``dense_h_to_4h``), any group of
    ``obliviate.models.layers.param_names_for`` (mlp_up, mlp_gate, mlp_down, mlp, attn, layer) or ``all``."""

    def __post_init__(self):
        check_ranges(self, nonnegative=("gamma", "alpha", "adv_lr"), at_least_one=("fork_every",),
                     fraction=("retain_momentum", "adv_decay"))
        if self.loss not in UNLEARNING_LOSSES:
            raise ConfigError(f"config key 'loss': must be one of {', '.join(UNLEARNING_LOSSES)}, got {self.loss!r}")
        if not self.modules:
            raise ConfigError(f"config key 'modules': give at least one of {', '.join(MODULES)}")
        bad = [m for m in self.modules if m not in MODULES]
        if bad:
            raise ConfigError(f"config key 'modules': unknown group {bad[0]!r} (valid: {', '.join(MODULES)})")


@register("mudman", paper=("Sondej et al. 2025, Robust LLM Unlearning with MUDMAN: Meta-Unlearning with Disruption "
                           "Masking And Normalization (arXiv:2506.12484; github.com/filyp/MUDMAN)"),
          equation=("γ · [sign ∇L_u = sign EMA(∇ retain NLL)] ⊙ ∇L_u / ‖∇L_u‖₂, L_u = −entropy on forget at a "
                    "forget-relearning adversary's weights (first-order) + α · retain NLL"),
          trains="each MLP's gate (else up) projection, every layer (`modules`)",
          presets={"tiny": {"lr": 1e-3, "steps": 50,
                            "params": {"gamma": 0.3, "adv_lr": 0.1, "fork_every": 10}},
                   "paper": {"lr": 1e-5, "steps": 125}},
          search=weighted_search("alpha"))
class MUDMAN(Method):
    config_cls = MUDMANConfig
    counts_calls = True
    multiprocess_unsupported = "the adversary and the retain gradient's running mean are this process's tensors"
    sharding_unsupported = "the adversary's weights are swapped into whole parameters in place"
    scaling = ("size class tiny/paper; γ, α: weights of a unit-norm and a nats gradient, not scaled; adversary lr "
               "and fork interval: chosen per size class; lr: × the fine-tuning run's lr over its preset's; steps "
               "fixed")

    def __init__(self, cfg):
        super().__init__(cfg)
        self.adversary: list[torch.Tensor] | None = None
        self.retain_acc: list[torch.Tensor] | None = None

    def trainable(self, model) -> list[str]:
        if "all" in self.cfg.modules:
            return ["*"]
        layers = range(num_layers(model))
        names: list[str] = []
        for group in self.cfg.modules:
            if group == "mlp_in":
                try:
                    names += param_names_for(model, "mlp_gate", layers)
                except ModelError:  # an ungated MLP (GPT-2, NeoX): its first projection is the up-projection
                    names += param_names_for(model, "mlp_up", layers)
            else:
                names += param_names_for(model, group, layers)
        return list(dict.fromkeys(names))

    def scorer_state(self) -> dict:
        state = super().scorer_state()
        for key in ("adversary", "retain_acc"):
            if getattr(self, key) is not None:
                state[key] = [t.detach().clone() for t in getattr(self, key)]
        return state

    def load_scorer_state(self, state: dict) -> None:
        super().load_scorer_state(state)
        self.adversary, self.retain_acc = state.get("adversary"), state.get("retain_acc")

    def _unlearning_gradient(self, model, params: list[torch.Tensor], forget: dict, step: int):
        """``(grad L_u, L_u)`` at the adversary's weights (at theta without ``meta``); moves the adversary one
        SGD step on the forget NLL."""
        cfg = self.cfg
        if not cfg.meta:
            logits, targets, _ = labelled_logits(model, forget)
            _, unlearn = forget_losses(logits, targets, cfg.loss)
            return param_grads(unlearn, params), unlearn
        if self.adversary is None or step % cfg.fork_every == 0:
            self.adversary = [p.detach().clone() for p in params]
        theta = [p.detach().clone() for p in params]
        try:
            with torch.no_grad():
                for p, a in zip(params, self.adversary):
                    p.copy_(a)
            logits, targets, _ = labelled_logits(model, forget)
            nll, unlearn = forget_losses(logits, targets, cfg.loss)
            g_u = param_grads(unlearn, params, retain_graph=True)
            g_adv = param_grads(nll, params)
            with torch.no_grad():
                for a, g, t in zip(self.adversary, g_adv, theta):
                    a.sub_(g, alpha=cfg.adv_lr).mul_(cfg.adv_decay).add_(t, alpha=1 - cfg.adv_decay)
        finally:
            with torch.no_grad():
                for p, t in zip(params, theta):
                    p.copy_(t)
        return g_u, unlearn

    def loss(self, model, batch, ref) -> dict:
        cfg, params = self.cfg, trained_params(model)
        step, self.calls = self.calls, self.calls + 1
        retain = mean_labelled_nll(model, batch["retain"])
        g_r = param_grads(retain, params)
        self.retain_acc = like(params, self.retain_acc) or [torch.zeros_like(p) for p in params]
        self.adversary = like(params, self.adversary)
        ema_(self.retain_acc, g_r, cfg.retain_momentum)
        g_u, unlearn = self._unlearning_gradient(model, params, batch["forget"], step)
        norm = global_norm(g_u) if cfg.normalize else None
        if cfg.mask:
            g_u = disruption_mask(g_u, self.retain_acc)
        if norm is not None:
            g_u = scaled(g_u, 1.0 / norm.clamp(min=1e-12))
        terms = {"unlearn": gradient_term(params, scaled(g_u, cfg.gamma), cfg.gamma * unlearn)}
        if cfg.alpha:
            terms["retain"] = gradient_term(params, scaled(g_r, cfg.alpha), cfg.alpha * retain)
        return terms
