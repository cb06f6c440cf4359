"""Evaluation: the scoring functions of ``core.py`` are exported here; the one suite is
:mod:`obliviate.eval.suite`."""

from obliviate.eval.core import (
    chance_corrected,
    choice_logprobs,
    greedy_generate,
    mcq_accuracy,
    mcq_prompt,
    normalise_text,
    qa_accuracy,
    rouge_l_recall,
    s_unlearning,
    token_loss_by_label,
)

__all__ = [
    "chance_corrected", "choice_logprobs", "greedy_generate", "mcq_accuracy", "mcq_prompt", "normalise_text",
    "qa_accuracy", "rouge_l_recall", "s_unlearning", "token_loss_by_label",
]
