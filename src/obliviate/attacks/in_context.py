"""In-context attacks: the forget question after k facts in the prompt.

Shumailov et al. 2024 ("UnUnlearning"): on forget halves A and B, each question of B after k facts of A
(re-introduction), after k retain facts (few-shot) and alone (zero-shot), scored by greedy prefix match
(:func:`prefix_accuracy`); the prompt is :func:`shots_prompt`. docs/evaluation.md, "In context".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.errors import ConfigError, DataError
from obliviate.eval.answers import answer_matches
from obliviate.eval.core import greedy_generate
from obliviate.eval.suite import answer_budget
from obliviate.tasks.base import Task

SEP = "\n\n"


def shots_prompt(task: Task, shots: Sequence[tuple[str, str]], question: str, tokenizer=None) -> str:
    """The prompt of ``question`` preceded by the ``shots`` (question, answer) facts (module docstring)."""
    if task.prompt.chat:
        facts = SEP.join(f"Question: {q}\nAnswer: {a}" for q, a in shots)
        return task.prompt.prompt(f"{facts}{SEP}{question}" if shots else question, tokenizer)
    facts = [task.prompt.prompt(q, tokenizer) + task.prompt.answer(a) for q, a in shots]
    return SEP.join([*facts, task.prompt.prompt(question, tokenizer)])


def prefix_accuracy(model, tokenizer, prompts: Sequence[str], answers: Sequence[str],
                    batch_size: int = 32) -> float:
    """Fraction of prompts whose greedy continuation starts with the words of its answer."""
    preds = greedy_generate(model, tokenizer, list(prompts), answer_budget(tokenizer, list(answers)),
                            batch_size)
    return float(np.mean([answer_matches(p, a, "prefix") for p, a in zip(preds, answers)]))


def in_context_prompts(task: Task, k: int, tokenizer=None, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """``{"reintro", "fewshot", "zero_shot"}`` -> (prompt, answer) of every question of both halves."""
    if k < 1:
        raise ConfigError(f"config key 'in_context_k': must be >= 1, got {k}")
    halves = task.forget_halves(seed)
    if halves is None or not all(halves):
        raise DataError(f"task {task.name!r}: the in-context attack needs at least 2 forget QA facts")
    if not task.retain.qa:
        raise DataError(f"task {task.name!r}: the few-shot attack needs retain QA facts")
    retain = list(task.retain.qa)[:k]
    out: dict[str, list] = {"reintro": [], "fewshot": [], "zero_shot": []}
    for test, other in ((halves[1], halves[0]), (halves[0], halves[1])):
        for q, a in test:
            out["reintro"].append((shots_prompt(task, list(other)[:k], q, tokenizer), a))
            out["fewshot"].append((shots_prompt(task, retain, q, tokenizer), a))
            out["zero_shot"].append((task.prompt.prompt(q, tokenizer), a))
    return out


def in_context_attack(model, tokenizer, task: Task, k: int = 4, *, seed: int = 0, max_items: int = 200,
                      batch_size: int = 32) -> dict:
    """``in_context_{reintro,fewshot,zero_shot}_acc``, ``in_context_acc`` (the attacker's best of the two
    attacks, what the verdict reads against ``_zero_shot_acc``), its counts (``in_context_items``: the
    questions scored, at most ``max_items``; ``in_context_variants`` 2: the best of two attacks on the same
    questions), ``in_context_k`` and ``in_context_cost``."""
    prompts = in_context_prompts(task, k, tokenizer, seed)
    out: dict = {"in_context_k": k}
    n: dict[str, int] = {}
    cost = Cost()
    with counting(model, cost=cost):
        for name, pairs in prompts.items():
            pairs = pairs[:max_items]
            n[name] = len(pairs)
            out[f"in_context_{name}_acc"] = prefix_accuracy(model, tokenizer, [p for p, _ in pairs],
                                                            [a for _, a in pairs], batch_size)
    best = max(("reintro", "fewshot"), key=lambda name: out[f"in_context_{name}_acc"])
    out["in_context_acc"] = out[f"in_context_{best}_acc"]
    out.update(read_counts("in_context", n[best], 2))
    out["in_context_cost"] = cost.as_dict()
    return out


@dataclass
class InContextConfig:
    k: int = 4
    """Facts put before each question."""


@register_attack("in_context", needs="at least 2 forget QA pairs to split in halves, and retain "
                                     "QA pairs for the few-shot examples",
                 applies=lambda task: task.forget_halves() is not None and bool(task.retain.qa),
                 config=InContextConfig,
                 reads=AttackRead("in_context_zero_shot_acc", "in_context_acc",
                                  label="the best of re-introduction and "
                                        "few-shot, against the question alone"))
def in_context_run(r: AttackRun, cfg: InContextConfig) -> dict:
    return in_context_attack(r.model, r.tokenizer, r.task, cfg.k, seed=r.cfg.seed,
                             max_items=r.cfg.max_eval)
