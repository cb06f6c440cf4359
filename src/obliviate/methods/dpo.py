"""DPO on preference data (Rafailov et al. 2023), as an unlearning objective (TOFU, Maini et al. 2024).

Each forget QA pair (x, y_l) comes with a preferred answer y_w from the task's preference data (a preference
file's chosen answer; the forget answer is its rejected one):

    L_forget = -(2/beta) * mean log sigmoid(beta * ((log pi(y_w|x) - log pi_ref(y_w|x))
                                                    - (log pi(y_l|x) - log pi_ref(y_l|x))))

with log pi the sum of answer-token log-probabilities. Total ``gamma * L_forget + alpha * L_retain``.

Details: docs/methods.md, "dpo" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obliviate.config import check_ranges
from obliviate.errors import DataError
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.unlearning.objectives import preference_loss
from obliviate.tasks.base import PreferredAnswers


@dataclass
class DPOConfig:
    beta: float = 0.1
    gamma: float = 1.0
    alpha: float = 1.0
    retain: Literal["nll", "kl"] = "nll"

    def __post_init__(self):
        check_ranges(self, positive=("beta", "gamma"), nonnegative=("alpha",))


@register("dpo", paper=("Rafailov et al. 2023, Direct Preference Optimization (arXiv:2305.18290), for "
                        "unlearning as in TOFU (Maini et al. 2024); open-unlearning DPO trainer (afcd6b6) + "
                        "configs/trainer/DPO.yaml"),
          equation="−(2/β) mean log σ(β (Δ_chosen − Δ_forget)) on preference data + α · retain NLL / KL",
          presets={"tiny": {"lr": 1e-3, "steps": 50},
                   "paper": {"lr": 1e-5, "steps": 125, "params": {"beta": 0.1}}},
          search=weighted_search("alpha"))
class DPO(Method):
    config_cls = DPOConfig
    needs_reference = True
    needs_idk = True
    preferred = "preference data (a chosen answer per forget QA pair)"
    needs_preference_data = True

    def cached_reference_keys(self) -> tuple[str, ...]:
        return () if self.cfg.retain == "kl" else ("forget", "idk")

    def winners(self, model, tokenizer, forget, idk, prompt) -> list[str] | None:
        if not isinstance(idk, PreferredAnswers):
            raise DataError("method 'dpo' needs preference data: a chosen answer for each forget QA pair (a "
                            "forget file with a 'chosen' field, or the entry key chosen: FIELD; "
                            "docs/tasks.md); for refusals as the chosen answers use idkdpo")
        if len(idk) != len(forget.qa):
            raise DataError(f"method 'dpo': {len(idk)} chosen answers for {len(forget.qa)} forget QA pairs")
        return list(idk)

    def loss(self, model, batch, ref) -> dict:
        return preference_loss(model, batch, ref, self.cfg)
