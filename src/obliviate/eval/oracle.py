"""Distance to the gold standard: an oracle model pretrained without the forget facts.

- :func:`world_truth_ratios`: TOFU truth ratio per fact (:func:`obliviate.eval.tofu.model_truth_ratio`),
  ``R = exp(L(answer_paraphrase | question) - mean_j L(perturbed_j | question))``, scored after the
  canonical question's ``qa_prompt``.
- :func:`forget_quality_vs_oracle`: KS-test p-value between the model's and the oracle's truth
  ratios on the forget facts (:func:`obliviate.eval.tofu.forget_quality`); 1 = indistinguishable.
- :func:`oracle_gap`: forget QA accuracy (greedy exact match, as ``forget_qa_acc`` of
  :func:`obliviate.tasks.world.evaluate_world`) of the model minus the oracle's (signed: > 0 means the
  model still knows more than a model that never saw the facts; < 0 means it over-forgot, which
  is itself detectable), and its absolute value.

The oracle's numbers do not change between the models compared with it, so
:func:`oracle_distance` computes them once per (oracle, tokenizer, world) and keeps them while
the oracle object lives; they can also be passed in.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from obliviate.data import qa_prompt
from obliviate.errors import DataError
from obliviate.eval.answers import forget_qa_eval
from obliviate.eval.tofu import forget_quality, model_truth_ratio

_ORACLE_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def world_truth_ratios(model, tokenizer, facts: Sequence[dict], batch_size: int = 64) -> np.ndarray:
    """Truth ratio of each fact under ``model``: shape (len(facts),). Small R: the model prefers the truth."""

    if not facts:
        raise DataError("no facts to compute truth ratios on")
    return model_truth_ratio(model, tokenizer, [f["question"] for f in facts],
                             [f["answer_paraphrase"] for f in facts], [f["perturbed_answers"] for f in facts],
                             batch_size=batch_size, prompt_fn=qa_prompt)


def forget_quality_vs_oracle(tr_model, tr_oracle) -> float:
    """KS-test p-value between the two truth-ratio samples (TOFU forget quality)."""

    return forget_quality(tr_model, tr_oracle)


def oracle_gap(acc_model: float, acc_oracle: float) -> tuple[float, float]:
    """``(acc_model - acc_oracle, |acc_model - acc_oracle|)``."""
    gap = float(acc_model) - float(acc_oracle)
    return gap, abs(gap)


def _forget_acc(model, tokenizer, facts) -> float:

    return forget_qa_eval(tokenizer, facts, match="exact")(model)


def oracle_reference(oracle, tokenizer, world) -> dict:
    """The oracle's forget truth ratios and forget QA accuracy, computed once and cached per oracle."""
    key = (id(tokenizer), world.fingerprint())
    per_oracle = _ORACLE_CACHE.setdefault(oracle, {})
    if key not in per_oracle:
        facts = world.facts_by_split("forget")
        per_oracle[key] = {"truth_ratios": world_truth_ratios(oracle, tokenizer, facts),
                           "forget_acc": _forget_acc(oracle, tokenizer, facts)}
    return per_oracle[key]


def oracle_distance(model, oracle, tokenizer, world, *, oracle_truth_ratios=None,
                    oracle_forget_acc: float | None = None, forget_acc: float | None = None) -> dict:
    """How far ``model`` is from ``oracle`` on ``world``'s forget facts.

    ``oracle`` may be None when both ``oracle_truth_ratios`` and ``oracle_forget_acc`` are given;
    ``forget_acc`` (the model's exact-match forget QA accuracy) is measured unless given.
    Returns ``forget_quality``, ``forget_acc_gap`` (signed), ``abs_forget_acc_gap``,
    ``forget_acc`` and ``oracle_forget_acc``.
    """
    facts = world.facts_by_split("forget")
    if oracle_truth_ratios is None or oracle_forget_acc is None:
        if oracle is None:
            raise DataError("oracle_distance needs an oracle model or both oracle_truth_ratios and oracle_forget_acc")
        ref = oracle_reference(oracle, tokenizer, world)
        oracle_truth_ratios = ref["truth_ratios"] if oracle_truth_ratios is None else oracle_truth_ratios
        oracle_forget_acc = ref["forget_acc"] if oracle_forget_acc is None else oracle_forget_acc
    tr = world_truth_ratios(model, tokenizer, facts)
    acc = _forget_acc(model, tokenizer, facts) if forget_acc is None else float(forget_acc)
    gap, abs_gap = oracle_gap(acc, oracle_forget_acc)
    return {"forget_quality": forget_quality_vs_oracle(tr, oracle_truth_ratios), "forget_acc_gap": gap,
            "abs_forget_acc_gap": abs_gap, "forget_acc": acc, "oracle_forget_acc": float(oracle_forget_acc)}
