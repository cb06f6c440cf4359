"""Evaluation: the one suite (``suite.py``) and the scoring functions (``core.py``) exported here."""

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
