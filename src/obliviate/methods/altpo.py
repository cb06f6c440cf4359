"""AltPO: alternate preference optimisation (Mekala et al. 2024, COLING 2025).

DPO (:mod:`obliviate.methods.dpo`) whose preferred answer y_alt of each forget question is an alternate answer
the model itself generates before unlearning, so it learns to answer plausibly but otherwise instead of
refusing:

    L_forget = -(2/beta) * mean log sigmoid(beta * ((log pi(y_alt|x) - log pi_ref(y_alt|x)) - (log pi(y_f|x) - log pi_ref(y_f|x))))

total ``gamma * L_forget + alpha * L_retain`` (retain NLL / KL). The alternates are a data step
(:func:`obliviate.methods.alternates.alternate_answers`: seeded sampling, different from the forget answer,
cached on disk), made once from the model as it is before the first step; the loss is DPO's.

open-unlearning runs AltPO as its DPO trainer (``src/trainer/unlearn/dpo.py``, afcd6b6) on an alternate-answer
dataset its ``community/methods/AltPO/generate.py`` (5420d43) writes with the model; DPO.yaml (6c7b6d5 in
tahaEntesari/open-unlearning): beta = 0.1, gamma = alpha = 1, retain NLL. The paper prompts an instruction
model few-shot for an alternate; obliviate's tiny models are not instruction-tuned, so the alternate is sampled
from the model's own answer distribution (at ``temperature``).

Presets: tiny lr 1e-3, 50 steps (the default, not tuned); paper lr 1e-5, 125 steps, beta = 0.1 (the AltPO
README's grid: beta 0.05-0.5, lr 1e-5-5e-5, alpha 1-5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
from obliviate.data import IDENTITY_PROMPT
from obliviate.methods import register
from obliviate.methods.alternates import alternate_answers
from obliviate.methods.contract import Method
from obliviate.methods.dpo import preference_loss


@dataclass
class AltPOConfig:
    beta: float = 0.1
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"
    temperature: float = 1.0
    """Sampling temperature of the alternate answers."""
    tries: int = 5
    """Samples drawn per question until one differs from the forget answer."""
    max_new_tokens: int = 32
    """Longest alternate answer, in tokens."""
    seed: int = 0
    """Seed of the alternates' sampling."""

    def __post_init__(self):
        check_ranges(self, positive=("beta", "gamma", "temperature"), nonnegative=("alpha", "seed"),
                     at_least_one=("tries", "max_new_tokens"))


@register("altpo", paper=("Mekala et al. 2024, Alternate Preference Optimization for Unlearning Factual Knowledge "
                          "(arXiv:2409.13474); open-unlearning DPO trainer (afcd6b6) on community/methods/AltPO "
                          "alternates"),
          equation="−(2/β) mean log σ(β (Δ_alternate − Δ_forget)), alternates sampled from the model (cached) + α · retain NLL / KL",
          presets={"tiny": {"lr": 1e-3, "steps": 50}, "paper": {"lr": 1e-5, "steps": 125, "params": {"beta": 0.1}}})
class AltPO(Method):
    config_cls = AltPOConfig
    needs_reference = True
    needs_idk = True
    multiprocess_unsupported = "its alternate answers are generated before training, in one process"

    def trainable(self, model) -> list[str]:
        return ["*"]

    def cached_reference_keys(self) -> tuple[str, ...]:
        return () if self.cfg.retain == "kl" else ("forget", "idk")

    def winners(self, model, tokenizer, forget, idk, prompt) -> list[str]:
        fmt = prompt or IDENTITY_PROMPT
        pairs = fmt.pairs(forget.qa, tokenizer)
        starts = [p + (fmt.answer("") if prompt is not None else " ") for p, _ in pairs]
        c = self.cfg
        return alternate_answers(model, tokenizer, starts, [a for _, a in forget.qa], seed=c.seed,
                                 temperature=c.temperature, tries=c.tries, max_new_tokens=c.max_new_tokens)

    def loss(self, model, batch, ref) -> dict:
        return preference_loss(self, model, batch, ref)
