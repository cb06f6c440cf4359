"""Exact memorization and extraction strength: how much of an answer the model predicts greedily.

``EM(x, y) = (1/n) sum_t 1[argmax_z p(z | x, y_<t) = y_t]`` (Tirumala et al. 2022, arXiv:2205.10770); ``ES(x,
y) = 1 - k*/n``, ``k*`` the shortest answer prefix from which greedy decoding completes it (Carlini et al.
2021, arXiv:2012.07805). As OpenUnlearning's code, edge cases included: docs/evaluation.md, "Memorization".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from obliviate.errors import DataError
from obliviate.eval.metric import FORGET, MetricRun, register_metric
from obliviate.eval.mia import split_examples, token_logprob_stats


def greedy_matches(stats: dict) -> np.ndarray:
    """Per answer token, whether the greedy prediction given the true prefix is the token (bool, length
    ``n``): the scored tokens of ``stats`` (:func:`~obliviate.eval.mia.token_logprob_stats`) but the last
    one."""
    return (np.asarray(stats["greedy"]) == np.asarray(stats["token_ids"]))[:-1]


def exact_memorization_score(matches) -> float | None:
    """``(1/n) sum_t matches_t``; None for ``n = 0`` (OpenUnlearning's ``None``, left out of the mean)."""
    m = np.asarray(matches, dtype=bool).ravel()
    return float(m.mean()) if m.size else None


def extraction_strength_score(matches) -> float:
    """``1 - k*/n``, ``k*`` the first ``k`` in ``0..n-1`` with ``matches[k:]`` all true, else ``n - 1`` (so
    a last token predicted wrong gives ``1/n``, as OpenUnlearning's loop leaves ``k`` there); 0 for ``n =
    0``."""
    m = np.asarray(matches, dtype=bool).ravel()
    n = m.size
    if n == 0:
        return 0.0
    k = next((k for k in range(n) if m[k:].all()), n - 1)
    return 1.0 - k / n


def memorization_metrics(model, tokenizer, examples: Sequence, batch_size: int = 16,
                         max_len: int | None = None,
                         *, add_eos: bool = True) -> dict:
    """``{"extraction_strength", "exact_memorization", "per_example": {...}}`` of ``model`` on ``examples``
    (texts, or ``(prompt, answer)`` pairs: only the answer is scored), the means over examples of
    :func:`extraction_strength_score` and :func:`exact_memorization_score` (module docstring). ``add_eos``:
    whether an eos follows the answer (the last scored token, which is then the one left out)."""
    texts, prefixes = split_examples(examples, "examples", "memorization_metrics")
    stats = token_logprob_stats(model, tokenizer, texts, prefixes, batch_size=batch_size, max_len=max_len,
                                add_eos=add_eos)
    matches = [greedy_matches(s) for s in stats]
    es = [extraction_strength_score(m) for m in matches]
    em = [exact_memorization_score(m) for m in matches]
    kept = [v for v in em if v is not None]
    if not kept:
        raise DataError(f"memorization_metrics: none of the {len(texts)} examples has an answer token to "
                        "compare (each is a single scored token)")
    return {"extraction_strength": float(np.mean(es)), "exact_memorization": float(np.mean(kept)),
            "per_example": {"extraction_strength": es, "exact_memorization": em}}


def _memorization(run: MetricRun) -> dict:
    """:func:`memorization_metrics` on the forget data, once for both metrics."""
    return run.once("memorization", lambda: memorization_metrics(run.model, run.tokenizer, run.forget,
                                                                 batch_size=run.batch_size,
                                                                 add_eos=run.add_eos))


@register_metric("extraction_strength", needs=[FORGET],
                 help="1 - (shortest answer prefix from which greedy decoding completes the answer) / answer "
                      "length (obliviate.eval.memorization)")
def extraction_strength(run: MetricRun) -> float:
    return _memorization(run)["extraction_strength"]


@register_metric("exact_memorization", needs=[FORGET],
                 help="share of answer tokens the model predicts greedily given the true prefix "
                      "(obliviate.eval.memorization)")
def exact_memorization(run: MetricRun) -> float:
    return _memorization(run)["exact_memorization"]
