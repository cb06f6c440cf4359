"""What the attacks score: the forget items a relearning attack tracks (:func:`forget_items_fn`), questions in
the task's prompt format (:func:`qa_score_fn`), and the task the attacks that rescore a whole task
(quantization, direction ablation) evaluate (:func:`scoring_task`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from obliviate.errors import DataError
from obliviate.eval.answers import answer_matches
from obliviate.eval.core import greedy_generate, mcq_accuracy
from obliviate.eval.suite import answer_budget
from obliviate.tasks.base import Task

SCORED = ("forget", "retain")
"""The roles an attack rescores: the forget score it reads, the retain score beside it (what the attack
broke)."""


def scoring_task(task: Task) -> Task:
    """``task`` with only its forget and retain evaluation sets, variants aside, and no extra named metrics:
    the sets ``forget_score`` and ``retain_score`` are the means of
    (:func:`~obliviate.eval.suite.evaluate_task`), so both read as on the whole task, at a fraction of its
    cost (the world: 2 of its 9 sets)."""
    evals = [es for es in task.evals if es.role in SCORED and not es.variant]
    return dataclasses.replace(task, evals=evals, meta={**task.meta, "metrics": []})


def qa_items_fn(tokenizer, task: Task, qa: Sequence[tuple[str, str]], batch_size: int = 32) -> Callable:
    """``fn(model)`` = greedy prefix match (1.0 / 0.0) of each of ``qa`` (question, answer) in the task's
    prompt format, an array."""
    if not qa:
        raise DataError("no questions to score the relearning attack on")
    prompts = [task.prompt.prompt(q, tokenizer) for q, _ in qa]
    answers = [a for _, a in qa]
    budget = answer_budget(tokenizer, answers)
    drafts = [task.prompt.answer(a) for a in answers]  # the answers as trained: checked in one pass

    def fn(model) -> np.ndarray:  # the greedy answers only (no answer probabilities: nothing here reads them)
        preds = greedy_generate(model, tokenizer, prompts, budget, batch_size, drafts=drafts)
        return np.asarray([answer_matches(p, a, "prefix") for p, a in zip(preds, answers)], dtype=float)

    return fn


def qa_score_fn(tokenizer, task: Task, qa: Sequence[tuple[str, str]], batch_size: int = 32) -> Callable:
    """``fn(model)`` = greedy prefix-match accuracy on ``qa`` (question, answer) in the task's prompt
    format."""
    items = qa_items_fn(tokenizer, task, qa, batch_size)
    return lambda model: float(np.mean(items(model)))


def split_score_fn(tokenizer, task: Task, splits: dict[str, Sequence[tuple[str, str]]],
                   batch_size: int = 32) -> Callable:
    """``fn(model)`` = ``{name: prefix-match accuracy}`` of each split of questions, scored in one pass."""
    names = list(splits)
    qa = [x for n in names for x in splits[n]]
    bounds = np.cumsum([0] + [len(splits[n]) for n in names])
    items = qa_items_fn(tokenizer, task, qa, batch_size)

    def fn(model) -> dict:
        c = items(model)
        return {n: float(np.mean(c[bounds[i]:bounds[i + 1]])) for i, n in enumerate(names)}

    return fn


def forget_items_fn(tokenizer, task: Task, max_eval: int = 200,
                    batch_size: int = 32) -> tuple[Callable, int] | None:
    """``(fn, n)``: ``fn(model)`` = the per-item score (1.0 / 0.0) of the ``n`` forget items a relearning
    attack tracks: forget QA (prefix match), else forget MCQs (the forget sets themselves, not their
    variants), a cloze MCQ read length-normalised (lm-eval's ``acc_norm``), as the verdict reads it: the raw
    sum favours short choices."""
    forget = task.evals_by_role("forget", variants=False)
    qa = [(x["question"], x["answer"]) for es in forget if es.kind == "qa" for x in es.items]
    if qa:
        return qa_items_fn(tokenizer, task, qa[:max_eval], batch_size), len(qa[:max_eval])
    mcqs = [m for es in forget if es.kind == "mcq" for m in es.items][:max_eval]
    if not mcqs:
        return None
    styles = {es.mcq_style for es in forget if es.kind == "mcq"}
    style = styles.pop() if len(styles) == 1 else "letters"
    items = [{"question": m["question"], "choices": list(m["choices"]), "answer_index": m["answer_index"]}
             for m in mcqs]

    def fn(model) -> np.ndarray:
        r = mcq_accuracy(model, tokenizer, items, style=style, batch_size=batch_size,
                         context_fn=lambda m: task.prompt.prompt(m["question"], tokenizer))
        if "predictions_norm" in r:
            return np.asarray([float(p == m["answer_index"]) for p, m in zip(r["predictions_norm"], items)])
        return np.asarray(r["correct"], dtype=float)

    return fn, len(items)


def forget_score_fn(tokenizer, task: Task, max_eval: int = 200, batch_size: int = 32) -> Callable | None:
    """The forget score a relearning attack tracks: the mean of :func:`forget_items_fn`."""
    found = forget_items_fn(tokenizer, task, max_eval, batch_size)
    return None if found is None else (lambda model: float(np.mean(found[0](model))))


def forget_chance(task: Task) -> float:
    """Chance level of the score :func:`forget_score_fn` tracks (0 for QA, 1/choices for MCQ)."""
    forget = task.evals_by_role("forget", variants=False)
    if any(es.kind == "qa" for es in forget):
        return 0.0
    sets = [es for es in forget if es.kind == "mcq"]
    return float(np.mean([es.chance for es in sets])) if sets else 0.0


def has_forget_qa(task: Task) -> bool:
    """Whether the task has forget QA items (the forget sets themselves, not their variants)."""
    return any(es.kind == "qa" for es in task.evals_by_role("forget", variants=False))
