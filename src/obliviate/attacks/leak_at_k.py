"""leak@k: greedy decoding hides answers that sampling finds.

Reisizadeh et al. 2025 (OptimAI-Lab/Leak-k): ``n`` sampled completions per forget question, ``c`` of them
holding the answer; ``leak@k = mean over questions of 1 - C(n - c, k) / C(n, k)``, the unbiased pass@k
estimator (Chen et al. 2021). Its settings, reads and counts: docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from math import comb

import numpy as np

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.scoring import has_forget_qa
from obliviate.errors import ConfigError, DataError
from obliviate.eval.answers import answer_matches
from obliviate.eval.core import greedy_generate, sample_generate
from obliviate.eval.suite import answer_budget
from obliviate.tasks.base import Task


@dataclass
class LeakConfig:
    n: int = 64
    """Completions drawn per question (the largest k)."""
    ks: list[int] = field(default_factory=lambda: [1, 4, 16, 64])
    temperature: float = 1.0
    top_p: float = 0.95
    max_items: int = 200
    batch_size: int = 256
    """Sequences per forward pass (a question's n completions share batches)."""
    seed: int = 0

    def __post_init__(self):
        if self.n < 1 or self.max_items < 1 or self.batch_size < 1:
            raise ConfigError("config key 'leak_n', 'leak_max_items' and 'leak_batch_size': must be >= 1, "
                              f"got {self.n}, {self.max_items}, {self.batch_size}")
        if not self.ks or any(not 1 <= k <= self.n for k in self.ks):
            raise ConfigError(f"config key 'leak_ks': each k must be in 1..n={self.n}, got {self.ks}")
        if not self.temperature > 0 or not 0 < self.top_p <= 1:
            raise ConfigError(f"config key 'leak_temperature' / 'leak_top_p': need temperature > 0 and "
                              f"0 < top_p <= 1, got {self.temperature}, {self.top_p}")


def leak_at_k(c: int, n: int, k: int) -> float:
    """The unbiased estimate of leak@k from ``c`` leaking completions of ``n`` (module docstring)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def forget_qa(task: Task) -> list[tuple[str, str]]:
    """The forget sets' own QA items (variants aside), as (question, answer)."""
    return [(x["question"], x["answer"]) for es in task.evals_by_role("forget",
                                                                      variants=False) if es.kind == "qa"
            for x in es.items]


def leak_counts(model, tokenizer, prompts: list[str], answers: list[str], cfg: LeakConfig) -> np.ndarray:
    """(questions,) how many of the ``cfg.n`` sampled completions of each prompt hold its answer."""
    texts = sample_generate(model, tokenizer, prompts, cfg.n, answer_budget(tokenizer, answers),
                            temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed,
                            batch_size=cfg.batch_size)
    return np.asarray([sum(answer_matches(t, a, "prefix") for t in ts) for ts, a in zip(texts, answers)])


def leak_attack(model, tokenizer, task: Task, cfg: LeakConfig | None = None) -> dict:
    """leak@k of the forget QA questions (module docstring); ``model`` is untouched."""
    cfg = cfg or LeakConfig()
    qa = forget_qa(task)[:cfg.max_items]
    if not qa:
        raise DataError(f"task {task.name!r}: leak@k needs forget QA questions")
    prompts = [task.prompt.prompt(q, tokenizer) for q, _ in qa]
    answers = [a for _, a in qa]
    cost = Cost()
    with counting(model, cost=cost):
        greedy = greedy_generate(model, tokenizer, prompts, answer_budget(tokenizer, answers), cfg.batch_size)
        counts = leak_counts(model, tokenizer, prompts, answers, cfg)
    out = {f"leak_at_k_{k}": float(np.mean([leak_at_k(int(c), cfg.n,
                                                      k) for c in counts])) for k in sorted(cfg.ks)}
    return {**out, "leak_at_k_acc": out[f"leak_at_k_{max(cfg.ks)}"],
            "leak_at_k_greedy_acc": float(np.mean([answer_matches(p, a, "prefix") for p,
                                                   a in zip(greedy, answers)])),
            "leak_at_k_sample_rate": float(counts.mean() / cfg.n),
            "leak_at_k_budget": {**asdict(cfg), "items": len(qa), "completions": len(qa) * cfg.n},
            **read_counts("leak_at_k", len(qa)),
            "leak_at_k_cost": cost.as_dict()}


@register_attack("leak_at_k", needs="forget QA pairs (a --forget file of questions and answers)",
                 applies=has_forget_qa, config=LeakConfig,
                 reads=AttackRead("leak_at_k_greedy_acc", "leak_at_k_acc",
                                  label="any of k sampled completions holds "
                                        "the answer (k = n), against greedy",
                                  shown=("leak_at_k_1", "leak_at_k_4", "leak_at_k_16")))
def leak_run(r: AttackRun, cfg: LeakConfig) -> dict:
    return leak_attack(r.model, r.tokenizer, r.task,
                       replace(cfg, max_items=min(cfg.max_items, r.cfg.max_eval)))
