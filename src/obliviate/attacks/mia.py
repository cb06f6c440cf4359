"""Membership inference (the attack ``mia``): forget (members) against holdout (non-members), Min-K% and
Min-K%++ (:func:`obliviate.eval.mia.mia_metrics`). It has no before and after: the verdict reads it against
the negative control alone (:func:`obliviate.evidence.verdict.control_readout`)."""

from __future__ import annotations

from dataclasses import dataclass

from obliviate.attacks.attack import AttackRun, register_attack
from obliviate.errors import ConfigError, DataError
from obliviate.eval.mia import mia_metrics
from obliviate.tasks.base import Task


@dataclass
class MIAConfig:
    k: float = 0.2
    """k of Min-K% and Min-K%++ (MUSE reports PrivLeak on Min-40%: ``k=0.4``)."""

    def __post_init__(self):
        if not 0 < self.k <= 1:
            raise ConfigError(f"config key 'k': must be in (0, 1], got {self.k}")


def mia_examples(task: Task, tokenizer) -> tuple[list, list]:
    """Members (the forget data) and non-members (the holdout), as (prompt, answer) pairs or texts, the same
    kind on both sides: QA pairs when both have them, else documents."""
    f, h = task.forget, task.holdout
    if f.qa and h.qa:
        return task.prompt.pairs(f.qa, tokenizer), task.prompt.pairs(h.qa, tokenizer)
    if f.docs and h.docs:
        return list(f.docs), list(h.docs)
    raise DataError(f"task {task.name!r}: forget and holdout data are of different kinds (QA pairs vs "
                    "documents): membership inference needs the same kind on both sides")


@register_attack("mia", needs="a holdout set: texts like the forget data "
                              "that the model never saw (--holdout FILE)",
                 applies=lambda task: bool(task.holdout), config=MIAConfig)
def mia_attack(r: AttackRun, cfg: MIAConfig) -> dict:
    """Membership inference: forget (members) against holdout (non-members); in the task's own setting where
    it declares one (``meta["mia"]``: MUSE's Min-40%, no eos, on its privleak samples), with ``attacks.mia.k``
    as extra columns (``mia_auc_min_k_k20``, ...)."""
    setting = r.task.meta.get("mia")
    if setting:
        return mia_metrics(r.model, r.tokenizer, setting["members"], setting["nonmembers"], k=setting["k"],
                           add_eos=setting["add_eos"], extra_ks=(cfg.k,))
    members, nonmembers = mia_examples(r.task, r.tokenizer)
    return mia_metrics(r.model, r.tokenizer, members, nonmembers, k=cfg.k)

