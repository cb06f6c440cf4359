"""UNDO: Unlearn-Noise-Distill-on-Outputs (Lee et al. 2025, "Distillation Robustifies Unlearning", NeurIPS
2025, arXiv:2506.06278; code: github.com/AddieFoote/distillation-robustify-unlearning).

One run in three stages, over the run's ``steps``: **unlearn** with a base method (GradDiff by default, or
NPO) for the first ``round((1 - distill_frac) * steps)`` steps; **noise** once, at the switch: the unlearned
model becomes the frozen teacher, and the student starts from

    theta_s = (1 - alpha) * theta_u + alpha * beta * eps,     eps Xavier-uniform for matrices, 0 for vectors

then **distill** for the remaining steps on retain data only: min KL(p_teacher || p_student).

Details: docs/methods.md, "undo" under "Method details".
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from obliviate.config import check_ranges
from obliviate.errors import ConfigError
from obliviate.losses import at_least_float32, ratio_of_sums
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import (forward_logits, mean_labelled_nll, npo_loss, sequence_logprob,
                                             trained_params)


def perturb(params: list[torch.Tensor], alpha: float, beta: float, seed: int) -> None:
    """theta <- (1 - alpha) theta + alpha beta eps, in place: eps Xavier-uniform for matrices, 0 for
    vectors."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            if p.dim() >= 2:
                fan_out, fan_in = p.shape[0], p[0].numel()
                a = (6.0 / (fan_in + fan_out)) ** 0.5
                eps = (torch.rand(p.shape, generator=g, dtype=torch.float32) * 2 - 1) * a
            else:
                eps = torch.zeros(p.shape)
            p.mul_(1 - alpha).add_(eps.to(device=p.device, dtype=p.dtype), alpha=alpha * beta)


def distill_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
               attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real next-token positions (a real token follows) of KL(p_teacher || p_student)."""
    logp = F.log_softmax(at_least_float32(student_logits[:, :-1]), -1)
    logq = F.log_softmax(at_least_float32(teacher_logits[:, :-1]), -1)
    kl = (logq.exp() * (logq - logp)).sum(-1)  # (B, T-1)
    mask = attention_mask[:, 1:].to(kl.dtype)
    return ratio_of_sums((kl * mask).sum(), mask.sum())


@dataclass
class UNDOConfig:
    alpha: float = 0.5
    """Noise mix: theta_s = (1 - alpha) theta_u + alpha beta eps (0: no noise, 1: a fresh random student)."""
    beta: float = 0.1
    """Scale of the Xavier-uniform noise eps."""
    distill_frac: float = 0.5
    """Share of the run's steps spent distilling (the rest unlearns first)."""
    base: Literal["graddiff", "npo"] = "graddiff"
    """The unlearning method of stage 1."""
    gamma: float = 1.0
    """Stage 1: weight of the forget term."""
    base_alpha: float = 1.0
    """Stage 1: weight of the retain NLL."""
    npo_beta: float = 0.1
    """Stage 1 with base="npo": NPO's beta."""
    seed: int = 0
    """Seed of the noise eps."""

    def __post_init__(self):
        check_ranges(self, positive=("gamma", "npo_beta"), nonnegative=("beta", "base_alpha"),
                     fraction=("alpha", "distill_frac"))


@register("undo", paper=("Lee et al. 2025, Distillation Robustifies Unlearning (UNDO; NeurIPS 2025, "
                         "arXiv:2506.06278; github.com/AddieFoote/distillation-robustify-unlearning)"),
          equation=("unlearn (GradDiff or NPO), then θ_s = (1−α)θ_u + αβε, then min KL(p_teacher ‖ "
                    "p_student) on retain data"),
          presets={"tiny": {"lr": 3e-4, "steps": 100, "params": {"base_alpha": 10.0}},
                   "paper": {"lr": 1e-5, "steps": 250}},
          search=weighted_search("alpha", (0.1, 0.3, 1)))
class UNDO(Method):
    counts_calls = True
    config_cls = UNDOConfig
    needs_reference = True  # with base="npo"; __init__ says for the config
    sharding_unsupported = "UNDO perturbs whole parameters in place and copies the model as its teacher"
    scaling = ("size class tiny/paper; α, β: relative to the weights and Xavier's scale, not scaled; γ, base "
               "α, NPO β: log-probabilities, not scaled; lr: × the fine-tuning run's lr over its preset's; "
               "steps fixed (split by distill_frac)")

    def __init__(self, cfg: UNDOConfig):
        super().__init__(cfg)
        self.needs_reference = cfg.base == "npo"
        self.switch: int | None = None
        self.teacher = None
        self._teacher_state: dict | None = None

    def cached_reference_keys(self) -> tuple[str, ...]:
        return ("forget",)

    def on_data(self, sizes: dict) -> None:
        steps = int(sizes["steps"])
        if steps < 2:
            raise ConfigError("method 'undo' needs at least 2 steps (one "
                              f"to unlearn, one to distil), got {steps}")
        self.switch = min(steps - 1, max(1, round((1 - self.cfg.distill_frac) * steps)))

    def scorer_state(self) -> dict:
        state = super().scorer_state()
        if self.teacher is not None:
            state["teacher"] = {k: v.detach().clone() for k, v in self.teacher.state_dict().items()}
        return state

    def load_scorer_state(self, state: dict) -> None:
        super().load_scorer_state(state)
        self._teacher_state = state.get("teacher")

    def loss(self, model, batch, ref) -> dict:
        step, self.calls = self.calls, self.calls + 1
        if self.switch is None or step < self.switch:
            return self._unlearn(model, batch, ref)
        if self.teacher is None:
            self.teacher = copy.deepcopy(model).eval()
            for p in self.teacher.parameters():
                p.requires_grad_(False)
            # a resumed run: the teacher of the first run, already noised student
            if self._teacher_state is not None:
                self.teacher.load_state_dict(self._teacher_state)
                self._teacher_state = None
            else:
                perturb(trained_params(model), self.cfg.alpha, self.cfg.beta, self.cfg.seed)
        r = batch["retain"]
        with torch.no_grad():
            teacher_logits = forward_logits(self.teacher, r)
        return {"distill": distill_kl(forward_logits(model, r), teacher_logits, r["attention_mask"])}

    def _unlearn(self, model, batch, ref) -> dict:
        f = batch["forget"]
        if self.cfg.base == "npo":
            forget = npo_loss(sequence_logprob(model, f), ref.answer_logprob(f, "forget"), self.cfg.npo_beta)
        else:
            forget = -mean_labelled_nll(model, f)
        terms = {"forget": self.cfg.gamma * forget}
        if self.cfg.base_alpha:
            terms["retain"] = self.cfg.base_alpha * mean_labelled_nll(model, batch["retain"])
        return terms
