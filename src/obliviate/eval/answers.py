"""Scoring greedy answers against references: the token budget, exact or prefix match, and QA accuracy
on a list of facts (what the relearning attack and the oracle's check measure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from obliviate.errors import ConfigError, DataError
from obliviate.eval.core import normalise_text, qa_accuracy


def answer_token_budget(tokenizer, answers: Sequence[str], slack: int = 4, cap: int | None = None) -> int:
    """Greedy-generation budget for exact match: the longest answer's token count plus ``slack`` (at most
    ``cap``).

    A generation that needs more tokens than the reference plus a stop token cannot match it,
    so this cuts generation time without changing exact-match results.
    """
    longest = max((len(tokenizer(" " + a, add_special_tokens=False)["input_ids"]) for a in answers),
                  default=0)
    return longest + slack if cap is None else min(cap, longest + slack)


def answer_matches(prediction: str, answer: str, match: str = "prefix") -> bool:
    """``"exact"``: normalised equality; ``"prefix"``: the normalised prediction's first words are the
    answer's."""
    want, got = normalise_text(answer).split(), normalise_text(prediction).split()
    if match == "exact":
        return got == want
    if match == "prefix":
        return bool(want) and got[:len(want)] == want
    raise ConfigError(f"unknown answer match {match!r} (valid: exact, prefix)")


def forget_qa_eval(tokenizer, facts: Sequence[dict], match: str = "prefix",
                   batch_size: int = 64) -> Callable[[torch.nn.Module], float]:
    """``fn(model)`` = greedy QA accuracy on ``facts`` (canonical question, canonical answer).

    ``match="prefix"`` (default) counts a greedy answer that *starts with* the reference answer
    (normalised, whole words): a model fine-tuned on prose often runs on after the answer
    ("It is treated with vruroxil. The oldest account ...") instead of ending the line, and
    exact match would wrongly score that fact as forgotten. ``match="exact"`` is the exact match
    of :func:`obliviate.eval.qa_accuracy` (``<split>_qa_acc`` of ``evaluate_world``); on a model
    that ends its answers with a newline the two agree.
    """
    if not facts:
        raise DataError("no facts to evaluate relearning on")
    answer_matches("", "x", match)  # validates ``match`` now, not at the first evaluation
    questions = [f["question"] for f in facts]
    answers = [f["answer"] for f in facts]
    budget = answer_token_budget(tokenizer, answers)

    def fn(model) -> float:
        r = qa_accuracy(model, tokenizer, questions, answers, max_new_tokens=budget, batch_size=batch_size)
        if match == "exact":
            return r["exact_match"]
        return float(np.mean([answer_matches(p, a, match) for p, a in zip(r["predictions"], answers)]))

    return fn
