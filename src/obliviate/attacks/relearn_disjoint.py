"""Relearning on some forget facts, scored on others the attacker never trained on (the attack
``relearn_disjoint``), with the leakage check between the two, the recovery cost and the cost of learning the
facts from scratch (docs/evaluation.md, "Attacks")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.relearn import (RelearnConfig, attack_grid, curve_auc, learning_ratio, mean_curves,
                                       n_params,
                                      recovery_cost, relearn_attack, selected_metrics)
from obliviate.attacks.scoring import qa_score_fn, split_score_fn
from obliviate.eval.suite import effective_items
from obliviate.tasks.base import Task


@dataclass
class DisjointConfig:
    learning: bool = True
    """Also fine-tune on one held-out part's own facts and read the tokens to reach half the base model's
    score there (``learning_*``): on the oracle that is learning them from scratch, the scale of
    ``recovery_cost_vs_learning`` (:func:`add_learning_ratios`)."""

def _token_curve(res: dict, curve: list) -> list:
    """``curve`` (``[[step, score], ...]`` of the run ``res``) against the tokens trained on by each read."""
    return [(int(t), v) for t, (_, v) in zip(res["tokens_at"], curve)]


def _cost(folds: list[list[tuple[str, dict, list, list]]], v_bases: list[float | None] | None, start: float,
          base: float | None, n: int) -> dict:
    """:func:`~obliviate.attacks.relearn.recovery_cost` with the attacker's setting chosen on V, read on B.

    Each fold (a list of ``(tag, result, V curve, B curve)`` per setting) picks the setting that wins back
    half of what V lost (towards ``v_bases``, the base model's V score of each fold) in the fewest tokens
    (none reaching it: the highest area under the V curve; ties: the grid's order); the cost is read on the
    chosen settings' B curves, the mean over folds, against ``start`` and ``base`` (B's). B never enters the
    choice (``recovery_cost_chosen_on`` ``"V"``, ``recovery_cost_scored_on`` ``"B"``,
    ``recovery_cost_setting``: each fold's choice)."""
    chosen = []
    for i, runs in enumerate(folds):
        vb = None if v_bases is None else v_bases[i]

        def key(item, vb=vb):
            order, (_, res, v, _) = item
            c = recovery_cost([_token_curve(res, v)], v[0][1], vb)
            t = (c["recovery_cost_tokens"] if c["recovery_cost_bound"] in ("exact", "at_most")
                 else float("inf"))
            return t, -curve_auc(v), order

        chosen.append(min(enumerate(runs), key=key)[1])
    b = mean_curves([run[3] for run in chosen])
    tokens = np.mean([run[1]["tokens_at"] for run in chosen], axis=0)
    curve = [(int(round(t)), v) for t, (_, v) in zip(tokens, b)]
    return {**recovery_cost([curve], start, base, n), "recovery_cost_setting": [run[0] for run in chosen],
            "recovery_cost_chosen_on": "V", "recovery_cost_scored_on": "B"}


LEARNING_KEYS = {"recovery_cost_tokens": "learning_cost_tokens", "recovery_cost_bound": "learning_cost_bound",
                 "recovery_cost_reason": "learning_cost_reason", "recovery_target": "learning_target",
                 "recovery_budget_tokens": "learning_budget_tokens"}


def _learning(r: "AttackRun", held: list, base: float | None, grid: list[tuple[str, RelearnConfig]],
              fold: int) -> dict:
    """Fine-tune on the facts ``held`` themselves and read the tokens until their score reaches half the base
    model's (``base``; the chance level of QA is 0): ``learning_cost_tokens`` (with ``_bound``, ``_reason``,
    ``learning_target``, ``learning_budget_tokens``, ``learning_curve``). One setting, the same for every
    model: the grid's largest full fine-tuning rate (``learning_setting``), read at log-spaced steps. On the
    oracle this is learning the facts from scratch; :func:`add_learning_ratios` sets each model's cost against
    it."""
    tag, rc = max(((t, c) for t, c in grid if not c.lora), key=lambda x: x[1].lr)
    fn = qa_score_fn(r.tokenizer, r.task, held)
    res = relearn_attack(r.model, r.tokenizer, r.task.prompt.pairs(list(held), r.tokenizer), fn, rc,
                         out_dir=None if r.run_dir is None else r.run_dir / "learning", resume=r.resume)
    start = res["curve"][0][1]
    c = recovery_cost([_token_curve(res, res["curve"])], start, base,
                      target=None if base is None else 0.5 * base)
    return {**{LEARNING_KEYS[k]: c[k] for k in LEARNING_KEYS}, "learning_curve": res["curve"],
            "learning_start_acc": start, "learning_setting": tag, "learning_fold": fold}


def add_learning_ratios(metrics: dict, reference: str = "oracle") -> None:
    """Write ``recovery_cost_vs_learning`` (with ``_bound`` and ``_reason``) into every model of ``metrics``
    that has a learning cost: the ``reference`` model's (the oracle's: learning the facts from scratch) over
    its own (relearning them; :func:`~obliviate.attacks.relearn.learning_ratio`). The oracle's is computed
    once, by its own attack."""
    ref = metrics.get(reference)
    if ref is not None and "learning_cost_bound" not in ref:
        ref = None
    learn = ({"tokens": None, "bound": None, "reason": f"no {reference} (a model that never saw the facts)"}
             if ref is None else {"tokens": ref["learning_cost_tokens"], "bound": ref["learning_cost_bound"],
                                  "reason": ref.get("learning_cost_reason")})
    for m in metrics.values():
        if "learning_cost_bound" in m:
            m.update(learning_ratio(learn,
                                    {"tokens": m["learning_cost_tokens"], "bound": m["learning_cost_bound"],
                                            "reason": m.get("learning_cost_reason")}))


RARE_ANSWERS = 2
"""A word is rare when at most this many forget answers hold it (the leakage check: names, titles, places); a
word that only one answer holds can be in no other and says nothing, so the check reads words of 2 to this
many."""


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def answer_leakage(pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
                   corpus: Sequence[str]) -> float | None:
    """The share of rare words (:data:`RARE_ANSWERS`: in 2 to that many answers of ``corpus``) of each pair's
    test answers that also occur in its training answers, pooled over ``pairs`` of ``(train answers, test
    answers)``; None when the test answers hold no rare word."""
    counts: dict[str, int] = {}
    for a in corpus:
        for w in _words(a):
            counts[w] = counts.get(w, 0) + 1
    seen = total = 0
    for train, test in pairs:
        trained = set().union(*[_words(a) for a in train]) if train else set()
        rare = {w for a in test for w in _words(a) if 2 <= counts.get(w, 0) <= RARE_ANSWERS}
        seen += len(rare & trained)
        total += len(rare)
    return None if total == 0 else seen / total


def _seen_by_chance(m: int, n: int, k: int) -> float:
    """The chance that a sample of ``k`` of ``n`` answers holds at least one of ``m`` given ones."""
    if m <= 0 or k <= 0:
        return 0.0
    if k > n - m:
        return 1.0
    return 1.0 - float(np.prod([(n - m - i) / (n - i) for i in range(k)]))


LEAKAGE_FLAG = 0.4
"""``relearn_disjoint_leakage`` at or above which the disjoint recovery is flagged as inflated. A rare answer
word (in 2 answers) of a reported fact has its other answer in the training third about a third of the time by
chance alone (TOFU forget05/10 with authors kept whole: 0.32, the same as its random-draw reference); at 0.4
and above, clearly more of the reported answers are in the answers the attacker trains on than a split by
chance gives, so relearning can score them by repeating trained answers, not by bringing hidden knowledge back
(issue #42's Harry Potter trivia: 0.5, answers such as "Norbert" repeated across entities)."""


def leakage_flag(m: dict) -> str | None:
    """The warning on a disjoint recovery whose folds leak (:data:`LEAKAGE_FLAG`), else None."""
    leak = m.get("relearn_disjoint_leakage")
    if leak is None or leak < LEAKAGE_FLAG:
        return None
    return (f"high leakage: {100 * leak:.0f}% of the held-out answers' rare words are in the answers trained "
            f"on (flagged at {100 * LEAKAGE_FLAG:.0f}%), which inflates this recovery: part of it is answers "
            "seen in training, not knowledge brought back")


def leakage_metrics(task: Task, folds: list[tuple[list, list, list]],
                    prefix: str = "relearn_disjoint") -> dict:
    """``<prefix>_leakage``: :func:`answer_leakage` of the attack's folds (train A, report B); and, where the
    task has groups, ``<prefix>_leakage_between_groups``: the share a training set of A's size drawn at random
    from the answers of the groups B does not touch would show on average (for each rare word of B, the chance
    that |A| random such answers hold it). A split that keeps groups whole reads no higher (its A is such a
    draw, taken group by group); one that cuts through groups reads higher, because facts about one entity
    share its rare words (TOFU: names, titles, places), while its reference falls towards 0 (B touches every
    group)."""
    qa, groups = task.forget_facts()
    corpus = [a for _, a in qa]
    out = {f"{prefix}_leakage": answer_leakage([([x[1] for x in a], [x[1] for x in b]) for a, _, b in folds],
                                               corpus),
           f"{prefix}_leakage_between_groups": None}
    if groups is None or len(set(groups)) < 2:
        return out
    counts: dict[str, int] = {}
    for ans in corpus:
        for w in _words(ans):
            counts[w] = counts.get(w, 0) + 1
    group_of = {pair: g for pair, g in zip(qa, groups)}
    seen = total = 0.0
    for train, _, test in folds:
        held = {group_of.get(x) for x in test}
        outside = [_words(ans) for (_, ans), h in zip(qa, groups) if h not in held]
        rare = {w for x in test for w in _words(x[1]) if 2 <= counts.get(w, 0) <= RARE_ANSWERS}
        seen += sum(_seen_by_chance(sum(w in ws for ws in outside), len(outside), len(train)) for w in rare)
        total += len(rare)
    out[f"{prefix}_leakage_between_groups"] = None if total == 0 else seen / total
    return out


@register_attack("relearn_disjoint", needs="at least 3 forget QA pairs to split into the attacker's folds",
                 applies=lambda task: task.forget_folds() is not None, config=DisjointConfig,
                 reads=AttackRead("relearn_disjoint_start_acc", "relearn_disjoint_acc",
                                  "relearn_disjoint_base_acc",
                                  label="relearning on other forget facts, held-out facts scored",
                                  flag=leakage_flag))
def disjoint_attack(r: AttackRun, cfg: DisjointConfig) -> dict:
    """Relearning on some forget facts, scored on others the attacker never trained on, at each setting.

    Three ways (:meth:`~obliviate.tasks.base.Task.forget_folds`, groups whole): train on A, choose the setting
    and the step on V, report on B, rotated so that each part is B once (:func:`selected_metrics`). Also the
    leakage check (:func:`leakage_metrics`), the recovery cost (:func:`_cost`; every curve read at log-spaced
    steps) and, with ``learning``, the cost of fine-tuning on fold 0's B facts themselves (:func:`_learning`).

    Its counts (:func:`~obliviate.attacks.attack.read_counts`): ``relearn_disjoint_items``, the B facts scored
    (each fold's at most ``max_eval``, each fact in one fold's B) as one binomial count:
    ``relearn_disjoint_acc`` is the plain mean of the folds' B scores, so a fact of a small fold weighs more,
    and :func:`~obliviate.eval.suite.effective_items` gives the count (the total where the folds' B are
    alike); and ``relearn_disjoint_variants`` 1 (the setting and step are chosen on V, B never enters the
    choice)."""
    folds = r.task.forget_folds(r.cfg.seed)
    if folds is None:
        return {}
    grid = [(tag, replace(rc, reads="log")) for tag, rc in attack_grid(r.model, r.cfg)]
    runs, bases, v_bases = [], [], []
    scored = [len(b[:r.cfg.max_eval]) for _, _, b in folds]
    for i, (a, v, b) in enumerate(folds):
        fn = split_score_fn(r.tokenizer, r.task, {"B": b[:r.cfg.max_eval], "V": v[:r.cfg.max_eval]})
        scores = (r.on_base(("disjoint", r.cfg.seed, i, r.cfg.max_eval), lambda b, fn=fn: fn(b))
                  if r.base_model is not None else None)
        target = None if scores is None else scores["B"]
        bases.append(target)
        v_bases.append(None if scores is None else scores["V"])
        pairs = r.task.prompt.pairs(list(a), r.tokenizer)
        fold = []
        for tag, rc in grid:
            res = relearn_attack(r.model, r.tokenizer, pairs, fn, rc, base_acc=target,
                                 out_dir=(None if r.run_dir is None
                                          else r.run_dir / f"disjoint-{tag}" / str(i)),
                                 resume=r.resume)
            fold.append((tag, res, res["curves"]["V"], res["curves"]["B"]))
        runs.append(fold)
    base = None if r.base_model is None else float(np.mean(bases))
    out = selected_metrics("relearn_disjoint", runs, base)
    learning = _learning(r, folds[0][2][:r.cfg.max_eval], bases[0], grid, 0) if cfg.learning else {}
    return {**out, "relearn_disjoint_selection": "V", "relearn_disjoint_folds": len(folds),
            **read_counts("relearn_disjoint", effective_items(scored)),
            **leakage_metrics(r.task, folds),
            **_cost(runs, v_bases, out["relearn_disjoint_start_acc"], base, n_params(r.model)), **learning}

