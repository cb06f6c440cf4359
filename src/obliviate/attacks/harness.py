"""The one attack suite, for every task (the world included): :func:`run_task_attacks`.

Relearning on the task's related corpus and on disjoint halves of the forget facts, membership
inference, a linear probe and the format shift, each where the task has its data (docs/evaluation.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
import logging
import re
import time
from pathlib import Path

import numpy as np

from obliviate.attacks.ablation import ablation_attack, forget_prompts, mean_last_states, retain_prompts
from obliviate.attacks.cost import counting
from obliviate.attacks.finetune_unrelated import unrelated_finetune_attack
from obliviate.attacks.format_shift import format_shift_attack, variant_sets
from obliviate.attacks.gcg import GCGConfig, gcg_attack
from obliviate.attacks.in_context import in_context_attack
from obliviate.attacks.leak_at_k import LeakConfig, leak_attack
from obliviate.attacks.logit_lens import logit_lens_attack
from obliviate.attacks.prefix import prefix_attack
from obliviate.attacks.probe import linear_probe_attack, value_probe_attack
from obliviate.attacks.prompts import prompt_attack
from obliviate.attacks.pruning import PruneConfig, prune_attack
from obliviate.attacks.quantize import quantize_attack
from obliviate.attacks.relearn import (RelearnConfig, curve_auc, learning_ratio, recovery_cost, relearn_attack,
                                      steps_to_reach)
from obliviate.attacks.scoring import scoring_task
from obliviate.attacks.soft_prompt import SoftPromptConfig, soft_prompt_attack
from obliviate.errors import ConfigError, DataError
from obliviate.eval.answers import answer_matches
from obliviate.eval.core import greedy_generate, mcq_accuracy
from obliviate.eval.mia import mia_metrics
from obliviate.eval.suite import answer_budget
from obliviate.methods import preset_name
from obliviate.models.layers import check_layer
from obliviate.registry import Registry
from obliviate.tasks.base import Task
from obliviate.train.distributed import is_main_process

log = logging.getLogger(__name__)


@dataclass
class TaskAttackConfig:
    relearn: RelearnConfig = field(default_factory=RelearnConfig)
    corpus: bool = True
    """Relearn on the task's related corpus, where it has one."""
    disjoint: bool = True
    """Relearn on one half of the forget QA facts, test on the other, and swap."""
    learning: bool = True
    """With ``disjoint``, also fine-tune on one held-out part's own facts and read the tokens to reach half the base
    model's score there (``learning_*``): on the oracle that is learning them from scratch, the scale of
    ``recovery_cost_vs_learning`` (:func:`add_learning_ratios`)."""
    probe: bool = True
    """Linear probe on the forget MCQs, where the task has them."""
    probe_layers: list[int] | None = None
    """Decoder layers to probe (default: all)."""
    lr_grid: list[float] | None = None
    """Learning rates the attacker tries (chosen, with the step, on a selection split: :func:`disjoint_attack`);
    default by model size, see :func:`attack_grid`. They replace ``relearn.lr``; the other ``relearn`` keys apply."""
    corpus_lr_grid: list[float] | None = None
    """Learning rates of the related-corpus attack, where they differ from ``lr_grid`` (default: ``lr_grid``)."""
    format_shift: bool = True
    """The best score over the task's variant forget sets (the facts asked another way), where it has them."""
    lora: bool = True
    """Also attack with LoRA adapters (at the grid's largest learning rate)."""
    mia: bool = True
    """Membership inference (forget vs holdout), where the task has a holdout split."""
    mia_k: float = 0.2
    """k of Min-K% and Min-K%++ (MUSE reports PrivLeak on Min-40%: ``mia_k=0.4``)."""
    probe_train_frac: float = 0.5
    probe_C: float = 1.0
    max_eval: int = 200
    """At most this many forget questions are scored at each point of a recovery curve."""
    seed: int = 0
    quantize: bool = False
    """Score quantized copies (:mod:`obliviate.attacks.quantize`, simulated on the CPU): about one evaluation of
    the task per scheme. The new attacks are off by default until the demo's budget and the controls take them
    (docs/evaluation.md, "More attacks", gives each one's cost)."""
    quantize_schemes: list[str] = field(default_factory=lambda: ["int4", "nf4"])
    """Of ``int8``, ``int4``, ``int8_g128``, ``int4_g128``, ``nf4``."""
    quantize_backend: str = "simulate"
    """``simulate`` (every machine) or ``bitsandbytes`` (its real 8-bit / 4-bit load, a CUDA model: int8, nf4)."""
    ablate: bool = False
    """Direction ablation (:mod:`obliviate.attacks.ablation`): one evaluation of the task, two with a base model
    (the white-box variant)."""
    logit_lens: bool = False
    """The logit lens on the forget QA items (:mod:`obliviate.attacks.logit_lens`): one forward per batch."""
    in_context: bool = False
    """Re-introduction and few-shot prompting (:mod:`obliviate.attacks.in_context`)."""
    in_context_k: int = 4
    """Facts put before each question."""
    prompts: bool = False
    """RWKU-style adversarial prompts (:mod:`obliviate.attacks.prompts`)."""
    unrelated_finetune: bool = False
    """Fine-tune on a few retain examples (:mod:`obliviate.attacks.finetune_unrelated`), at the grid's largest
    full fine-tuning learning rate."""
    unrelated_n: int = 10
    unrelated_steps: int = 20
    gcg: bool = False
    """The optimised suffix (:mod:`obliviate.attacks.gcg`); off unless asked for (``attacks=all``)."""
    gcg_config: GCGConfig = field(default_factory=GCGConfig)
    """The optimised suffix's and the universal prefix's configuration (one budget for both)."""
    leak_at_k: bool = False
    """Sampling: leak@k of the forget questions (:mod:`obliviate.attacks.leak_at_k`), ``leak_config.n``
    completions of each (at most ``max_eval`` questions)."""
    leak_config: LeakConfig = field(default_factory=LeakConfig)
    soft_prompt: bool = False
    """Soft prompt: optimised embeddings before the question (:mod:`obliviate.attacks.soft_prompt`)."""
    soft_prompt_config: SoftPromptConfig = field(default_factory=SoftPromptConfig)
    prune: bool = False
    """Neuron pruning (:mod:`obliviate.attacks.pruning`): one evaluation of the task per fraction."""
    prune_config: PruneConfig = field(default_factory=PruneConfig)
    gcg_prefix: bool = False
    """The universal prefix (:mod:`obliviate.attacks.prefix`), at ``gcg_config``'s budget."""
    select: list[str] | None = None
    """Run exactly these attacks, by name (:data:`ATTACKS`: ``relearn``, ``relearn_disjoint``, ``mia``, ``probe``,
    ``format_shift``, ``quantize``, ``ablate``, ``logit_lens``, ``in_context``, ``prompts``,
    ``unrelated_finetune``, ``gcg``, ``leak_at_k``, ``soft_prompt``, ``prune``, ``gcg_prefix``), or ``["all"]``;
    it sets every attack's flag (``--attacks`` on the command line, ``attacks=`` in the Python API). None: the
    flags as they are."""

    def __post_init__(self):
        if self.select is not None:
            for name, on in selected_flags(self.select).items():
                setattr(self, name, on)
        if not 0 < self.probe_train_frac < 1:
            raise ConfigError(f"config key 'probe_train_frac': must be in (0, 1), got {self.probe_train_frac}")
        if self.max_eval < 1:
            raise ConfigError(f"config key 'max_eval': must be >= 1, got {self.max_eval}")
        for key in ("lr_grid", "corpus_lr_grid"):
            grid = getattr(self, key)
            if grid is not None and (not grid or any(not 0 < lr < float("inf") for lr in grid)):
                raise ConfigError(f"config key '{key}': needs finite learning rates > 0, got {grid}")


def attack_names(names) -> list[str]:
    """``names`` (a list, or one comma-separated string; ``all`` for every attack) as registered attack names, in
    the harness's order; an unknown name is a one-line :class:`ConfigError` that names it and the valid ones."""
    if isinstance(names, str):
        names = [names]
    given = [n.strip() for x in names for n in str(x).split(",") if n.strip()]
    if not given:
        raise ConfigError(f"--attacks: no attack named (valid: all, {', '.join(ATTACKS)})")
    bad = [n for n in given if n != "all" and n not in ATTACKS]
    if bad:
        raise ConfigError(f"unknown attack {bad[0]!r} (valid: all, {', '.join(ATTACKS)})")
    return list(ATTACKS) if "all" in given else [n for n in ATTACKS if n in given]


def selected_flags(names) -> dict[str, bool]:
    """The :class:`TaskAttackConfig` flag of every attack, on for those of :func:`attack_names` ``(names)``."""
    chosen = set(attack_names(names))
    return {a.enabled: name in chosen for name, a in ATTACKS.items()}


def qa_items_fn(tokenizer, task: Task, qa: Sequence[tuple[str, str]], batch_size: int = 32) -> Callable:
    """``fn(model)`` = greedy prefix match (1.0 / 0.0) of each of ``qa`` (question, answer) in the task's prompt
    format, an array."""
    if not qa:
        raise DataError("no questions to score the relearning attack on")
    prompts = [task.prompt.prompt(q, tokenizer) for q, _ in qa]
    answers = [a for _, a in qa]
    budget = answer_budget(tokenizer, answers)

    def fn(model) -> np.ndarray:  # the greedy answers only (no answer probabilities: nothing here reads them)
        preds = greedy_generate(model, tokenizer, prompts, budget, batch_size)
        return np.asarray([answer_matches(p, a, "prefix") for p, a in zip(preds, answers)], dtype=float)

    return fn


def qa_score_fn(tokenizer, task: Task, qa: Sequence[tuple[str, str]], batch_size: int = 32) -> Callable:
    """``fn(model)`` = greedy prefix-match accuracy on ``qa`` (question, answer) in the task's prompt format."""
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


def forget_items_fn(tokenizer, task: Task, max_eval: int = 200, batch_size: int = 32) -> tuple[Callable, int] | None:
    """``(fn, n)``: ``fn(model)`` = the per-item score (1.0 / 0.0) of the ``n`` forget items a relearning attack
    tracks: forget QA (prefix match), else forget MCQs (the forget sets themselves, not their variants), a cloze
    MCQ read length-normalised (lm-eval's ``acc_norm``), as the verdict reads it: the raw sum favours short
    choices."""
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


LR_GRIDS = {"tiny": (1e-4, 3e-4, 1e-3), "paper": (1e-5, 3e-5, 1e-4)}

KNOWS_MARGIN = 0.1
"""A base model whose forget score is within this of chance does not know the forget set."""


def forget_chance(task: Task) -> float:
    """Chance level of the score :func:`forget_score_fn` tracks (0 for QA, 1/choices for MCQ)."""
    forget = task.evals_by_role("forget", variants=False)
    if any(es.kind == "qa" for es in forget):
        return 0.0
    sets = [es for es in forget if es.kind == "mcq"]
    return float(np.mean([es.chance for es in sets])) if sets else 0.0


def attack_grid(model, cfg: "TaskAttackConfig", lrs: list[float] | None = None) -> list[tuple[str, RelearnConfig]]:
    """The attacker's settings: full fine-tuning at each learning rate of the grid, and LoRA (``cfg.lora``).

    The grid (``lrs``, else ``cfg.lr_grid``) defaults by model size (:func:`obliviate.methods.preset_name`):
    1e-4, 3e-4, 1e-3 for tiny models, 1e-5, 3e-5, 1e-4 for larger ones; LoRA uses the largest rate.
    """
    lrs = lrs or cfg.lr_grid or list(LR_GRIDS[preset_name(model)])
    grid = [(f"lr{lr:g}", replace(cfg.relearn, lr=lr, lora=False)) for lr in lrs]
    if cfg.lora:
        grid.append((f"lora-lr{max(lrs):g}", replace(cfg.relearn, lr=max(lrs), lora=True)))
    return grid


def mia_examples(task: Task, tokenizer) -> tuple[list, list]:
    """Members (the forget data) and non-members (the holdout), as (prompt, answer) pairs or texts, the same
    kind on both sides: QA pairs when both have them, else documents."""
    f, h = task.forget, task.holdout
    if f.qa and h.qa:
        return task.prompt.pairs(f.qa, tokenizer), task.prompt.pairs(h.qa, tokenizer)
    if f.docs and h.docs:
        return list(f.docs), list(h.docs)
    raise DataError(f"task {task.name!r}: forget and holdout data are of different kinds (QA pairs vs documents): "
                    "membership inference needs the same kind on both sides")


def n_params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def probe_mcqs(task: Task) -> list:
    """The forget MCQs the choice probe reads: those of the forget sets, else of their first variant set."""
    sets = [es for es in task.evals_by_role("forget", variants=False) if es.kind == "mcq"]
    sets = sets or [es for es in task.evals_by_role("forget") if es.kind == "mcq"][:1]
    return [m for es in sets for m in es.items]


def _probe_metrics(probe: dict) -> dict:
    return {"probe_acc": probe["best_acc"], "probe_best_layer": probe["best_layer"], "probe_chance": probe["chance"],
            "probe_per_layer": {str(l): a for l, a in probe["per_layer"].items()}}


@dataclass
class AttackRun:
    """What every attack of one :func:`run_task_attacks` call reads."""

    model: object
    tokenizer: object
    task: Task
    cfg: TaskAttackConfig
    score_fn: Callable | None
    """The forget score the relearning attacks track (:func:`forget_score_fn`)."""
    base_model: object = None
    base_score: float | None = None
    metrics: dict | None = None
    run_dir: Path | None = None
    resume: bool = True
    base_cache: dict = field(default_factory=dict)
    """The base model's scores, each computed once (:meth:`on_base`)."""

    def on_base(self, key: tuple, fn: Callable):
        """``fn(base_model)``, computed once per base model and ``key`` and kept in :attr:`base_cache` (a
        comparison passes one cache for all the models it attacks, so the base model is scored once)."""
        key = (id(self.base_model), *key)
        if key not in self.base_cache:
            self.base_cache[key] = fn(self.base_model)
        return self.base_cache[key]


ATTACKS = Registry("attack")
"""The attacks of the harness in the order they run: ``name -> Attack``."""


@dataclass(frozen=True)
class Attack:
    fn: Callable[[AttackRun], dict]
    enabled: str
    """The :class:`TaskAttackConfig` flag that turns it on."""
    applies: Callable[[Task], bool]
    """Whether a task has the data the attack needs."""


def register_attack(name: str, enabled: str, applies: Callable[[Task], bool]):
    """Decorator: ``fn(run: AttackRun) -> dict`` of flat metrics becomes attack ``name`` of the harness."""
    return ATTACKS.register(name, wrap=lambda fn: Attack(fn, enabled, applies))


def _mean_curves(curves: list[list]) -> list[list]:
    """Pointwise mean of recovery curves evaluated at the same steps."""
    return [[c[0][0], float(np.mean([p[1] for p in c]))] for c in zip(*curves)]


def _pick(runs: list[tuple[str, dict, list, list]]) -> tuple[str, int, float, float]:
    """The attacker's choice among ``(tag, result, V curve, B curve)``: the setting and the step with the highest
    score on the selection split V (ties: the earlier step, then the earlier setting of the grid); returns
    ``(tag, step, V score, B score there)``."""
    best = None
    for order, (tag, _, v, b) in enumerate(runs):
        for (step, sv), (_, sb) in zip(v, b):
            key = (sv, -step, -order)
            if best is None or key > best[0]:
                best = (key, tag, int(step), float(sv), float(sb))
    return best[1:]


def _selected_metrics(prefix: str, folds: list[list[tuple[str, dict, list, list]]], base: float | None) -> dict:
    """What an attack reports from its folds, each a list of ``(tag, result, V curve, B curve)`` per setting.

    ``<prefix>_acc``: B's score at the setting and step chosen on V (:func:`_pick`), the mean over folds (unbiased:
    B never entered the choice); ``<prefix>_acc_optimistic``: the best B score over every setting and step (chosen
    on B itself, an upward-biased number); ``<prefix>_curve``: the mean of the chosen settings' B curves, which
    ``_start_acc``, ``_final_acc``, ``_auc``, ``_steps_to_base`` and ``_tokens_to_base`` read;
    ``<prefix>_setting`` / ``<prefix>_best_step``: each fold's choice; ``<prefix>_by_setting``: each setting's last
    B score (mean over folds); ``<prefix>_budget_limited``: a fold chose the budget's last step while its V curve was
    still rising at that read (more steps would have brought back more; ``_budget_limited_folds`` counts them)."""
    picks = [_pick(runs) for runs in folds]
    chosen = [next(run for run in runs if run[0] == tag) for runs, (tag, *_) in zip(folds, picks)]
    limited = [p[1] == run[2][-1][0] and len(run[2]) > 1 and run[2][-1][1] > run[2][-2][1]
               for p, run in zip(picks, chosen)]
    curve = _mean_curves([run[3] for run in chosen])
    tokens_per_step = float(np.mean([run[1]["tokens_per_step"] for run in chosen]))
    steps = steps_to_reach(curve, base)
    tags = [run[0] for run in folds[0]]
    return {f"{prefix}_acc": float(np.mean([p[3] for p in picks])),
            f"{prefix}_acc_optimistic": float(np.mean([max(sb for *_, b in runs for _, sb in b) for runs in folds])),
            f"{prefix}_final_acc": curve[-1][1], f"{prefix}_start_acc": curve[0][1], f"{prefix}_auc": curve_auc(curve),
            f"{prefix}_steps_to_base": steps, f"{prefix}_tokens_to_base": None if steps is None
            else int(steps * tokens_per_step), f"{prefix}_base_acc": base, f"{prefix}_curve": curve,
            f"{prefix}_tokens_per_step": tokens_per_step,
            f"{prefix}_setting": [p[0] for p in picks], f"{prefix}_best_step": [p[1] for p in picks],
            f"{prefix}_budget_limited": any(limited), f"{prefix}_budget_limited_folds": int(sum(limited)),
            f"{prefix}_by_setting": {t: float(np.mean([runs[i][3][-1][1] for runs in folds])) for i, t in enumerate(tags)}}


def _token_curve(res: dict, curve: list) -> list:
    """``curve`` (``[[step, score], ...]`` of the run ``res``) against the tokens trained on by each read."""
    return [(int(t), v) for t, (_, v) in zip(res["tokens_at"], curve)]


def _cost(folds: list[list[tuple[str, dict, list, list]]], v_bases: list[float | None] | None, start: float,
          base: float | None, n: int) -> dict:
    """:func:`~obliviate.attacks.relearn.recovery_cost` with the attacker's setting chosen on V, read on B.

    Each fold (a list of ``(tag, result, V curve, B curve)`` per setting) picks the setting that wins back half of
    what V lost (towards ``v_bases``, the base model's V score of each fold) in the fewest tokens (none reaching
    it: the highest area under the V curve; ties: the grid's order); the cost is read on the chosen settings' B
    curves, the mean over folds, against ``start`` and ``base`` (B's). B never enters the choice
    (``recovery_cost_chosen_on`` ``"V"``, ``recovery_cost_scored_on`` ``"B"``, ``recovery_cost_setting``: each
    fold's choice)."""
    chosen = []
    for i, runs in enumerate(folds):
        vb = None if v_bases is None else v_bases[i]

        def key(item, vb=vb):
            order, (_, res, v, _) = item
            c = recovery_cost([_token_curve(res, v)], v[0][1], vb)
            t = c["recovery_cost_tokens"] if c["recovery_cost_bound"] in ("exact", "at_most") else float("inf")
            return t, -curve_auc(v), order

        chosen.append(min(enumerate(runs), key=key)[1])
    b = _mean_curves([run[3] for run in chosen])
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
    ``learning_target``, ``learning_budget_tokens``, ``learning_curve``). One setting, the same for every model:
    the grid's largest full fine-tuning rate (``learning_setting``), read at log-spaced steps. On the oracle this
    is learning the facts from scratch; :func:`add_learning_ratios` sets each model's cost against it."""
    tag, rc = max(((t, c) for t, c in grid if not c.lora), key=lambda x: x[1].lr)
    fn = qa_score_fn(r.tokenizer, r.task, held)
    res = relearn_attack(r.model, r.tokenizer, r.task.prompt.pairs(list(held), r.tokenizer), fn, rc,
                         out_dir=None if r.run_dir is None else r.run_dir / "learning", resume=r.resume)
    start = res["curve"][0][1]
    c = recovery_cost([_token_curve(res, res["curve"])], start, base, target=None if base is None else 0.5 * base)
    return {**{LEARNING_KEYS[k]: c[k] for k in LEARNING_KEYS}, "learning_curve": res["curve"],
            "learning_start_acc": start, "learning_setting": tag, "learning_fold": fold}


def add_learning_ratios(metrics: dict, reference: str = "oracle") -> None:
    """Write ``recovery_cost_vs_learning`` (with ``_bound`` and ``_reason``) into every model of ``metrics`` that
    has a learning cost: the ``reference`` model's (the oracle's: learning the facts from scratch) over its own
    (relearning them; :func:`~obliviate.attacks.relearn.learning_ratio`). The oracle's is computed once, by its own
    attack."""
    ref = metrics.get(reference)
    if ref is not None and "learning_cost_bound" not in ref:
        ref = None
    learn = ({"tokens": None, "bound": None, "reason": f"no {reference} (a model that never saw the facts)"}
             if ref is None else {"tokens": ref["learning_cost_tokens"], "bound": ref["learning_cost_bound"],
                                  "reason": ref.get("learning_cost_reason")})
    for m in metrics.values():
        if "learning_cost_bound" in m:
            m.update(learning_ratio(learn, {"tokens": m["learning_cost_tokens"], "bound": m["learning_cost_bound"],
                                            "reason": m.get("learning_cost_reason")}))


RARE_ANSWERS = 2
"""A word is rare when at most this many forget answers hold it (the leakage check: names, titles, places); a word
that only one answer holds can be in no other and says nothing, so the check reads words of 2 to this many."""


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def answer_leakage(pairs: Sequence[tuple[Sequence[str], Sequence[str]]], corpus: Sequence[str]) -> float | None:
    """The share of rare words (:data:`RARE_ANSWERS`: in 2 to that many answers of ``corpus``) of each pair's test
    answers that also occur in its training answers, pooled over ``pairs`` of ``(train answers, test answers)``;
    None when the test answers hold no rare word."""
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


def leakage_metrics(task: Task, folds: list[tuple[list, list, list]], prefix: str = "relearn_disjoint") -> dict:
    """``<prefix>_leakage``: :func:`answer_leakage` of the attack's folds (train A, report B); and, where the task
    has groups, ``<prefix>_leakage_between_groups``: the share a training set of A's size drawn at random from the
    answers of the groups B does not touch would show on average (for each rare word of B, the chance that |A|
    random such answers hold it). A split that keeps groups whole reads no higher (its A is such a draw, taken
    group by group); one that cuts through groups reads higher, because facts about one entity share its rare
    words (TOFU: names, titles, places), while its reference falls towards 0 (B touches every group)."""
    qa, groups = task.forget_facts()
    corpus = [a for _, a in qa]
    out = {f"{prefix}_leakage": answer_leakage([([x[1] for x in a], [x[1] for x in b]) for a, _, b in folds], corpus),
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


def _part_curve(res: dict, parts: list[int], sizes: list[int]) -> list:
    """The curve of the union of ``parts`` (each ``p<i>`` curve of ``res``, weighted by its size)."""
    total = sum(sizes[i] for i in parts)
    c = [res["curves"][f"p{i}"] for i in parts]
    return [[pts[0][0], sum(sizes[i] * p[1] for i, p in zip(parts, pts)) / total] for pts in zip(*c)]


@register_attack("relearn", "corpus", lambda task: bool(task.relearn))
def corpus_attack(r: AttackRun) -> dict:
    """Relearning on the task's related corpus, at each setting of the corpus grid.

    The forget items it scores are cut into three seeded parts; each in turn is the selection split V (the
    setting and step are chosen on it) and the other two are B, where the score is read (``relearn_selection``
    ``"V"``). With fewer than 3 items there is no V: ``relearn_acc`` is then the best over settings and steps of
    every item, ``relearn_selection`` ``"optimistic"``."""
    found = forget_items_fn(r.tokenizer, r.task, r.cfg.max_eval)
    if found is None:
        return {}
    items, n = found
    parts = np.array_split(np.random.default_rng(r.cfg.seed).permutation(n), 3) if n >= 3 else []
    sizes = [len(p) for p in parts]

    def fn(model) -> dict:
        c = items(model)
        return {"all": float(np.mean(c)), **{f"p{i}": float(np.mean(c[p])) for i, p in enumerate(parts)}}

    tried = [(tag, relearn_attack(r.model, r.tokenizer, list(r.task.relearn), fn, rc, base_acc=r.base_score,
                                  out_dir=None if r.run_dir is None else r.run_dir / f"corpus-{tag}", resume=r.resume))
             for tag, rc in attack_grid(r.model, r.cfg, r.cfg.corpus_lr_grid)]
    if parts:
        folds = [[(tag, res, res["curves"][f"p{i}"], _part_curve(res, [j for j in range(3) if j != i], sizes))
                  for tag, res in tried] for i in range(3)]
    else:
        folds = [[(tag, res, res["curve"], res["curve"]) for tag, res in tried]]
    out = _selected_metrics("relearn", folds, r.base_score)
    return {**out, "relearn_selection": "V" if parts else "optimistic"}


@register_attack("relearn_disjoint", "disjoint", lambda task: task.forget_folds() is not None)
def disjoint_attack(r: AttackRun) -> dict:
    """Relearning on some forget facts, scored on others the attacker never trained on, at each setting.

    Three ways (:meth:`~obliviate.tasks.base.Task.forget_folds`, groups whole): train on A, choose the setting and
    the step on V, report on B, rotated so that each part is B once (:func:`_selected_metrics`). Also the
    leakage check (:func:`leakage_metrics`), the recovery cost (:func:`_cost`; every curve read at log-spaced steps)
    and, with ``learning``, the cost of fine-tuning on fold 0's B facts themselves (:func:`_learning`)."""
    folds = r.task.forget_folds(r.cfg.seed)
    if folds is None:
        return {}
    grid = [(tag, replace(rc, reads="log")) for tag, rc in attack_grid(r.model, r.cfg)]
    runs, bases, v_bases = [], [], []
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
                                 out_dir=None if r.run_dir is None else r.run_dir / f"disjoint-{tag}" / str(i),
                                 resume=r.resume)
            fold.append((tag, res, res["curves"]["V"], res["curves"]["B"]))
        runs.append(fold)
    base = None if r.base_model is None else float(np.mean(bases))
    out = _selected_metrics("relearn_disjoint", runs, base)
    learning = _learning(r, folds[0][2][:r.cfg.max_eval], bases[0], grid, 0) if r.cfg.learning else {}
    return {**out, "relearn_disjoint_selection": "V", "relearn_disjoint_folds": len(folds),
            **leakage_metrics(r.task, folds),
            **_cost(runs, v_bases, out["relearn_disjoint_start_acc"], base, n_params(r.model)), **learning}


@register_attack("mia", "mia", lambda task: bool(task.holdout))
def mia_attack(r: AttackRun) -> dict:
    """Membership inference: forget (members) against holdout (non-members); in the task's own setting where it
    declares one (``meta["mia"]``: MUSE's Min-40%, no eos, on its privleak samples), with ``mia_k`` as extra
    columns (``mia_auc_min_k_k20``, ...)."""
    setting = r.task.meta.get("mia")
    if setting:
        return mia_metrics(r.model, r.tokenizer, setting["members"], setting["nonmembers"], k=setting["k"],
                           add_eos=setting["add_eos"], extra_ks=(r.cfg.mia_k,))
    members, nonmembers = mia_examples(r.task, r.tokenizer)
    return mia_metrics(r.model, r.tokenizer, members, nonmembers, k=r.cfg.mia_k)


def _choice_probe_items(task: Task) -> list:
    mcqs = probe_mcqs(task)
    return mcqs if len(mcqs) >= 4 and len({len(m["choices"]) for m in mcqs}) == 1 else []


@register_attack("probe", "probe", lambda task: bool(task.probe) or bool(_choice_probe_items(task)))
def probe_attack(r: AttackRun) -> dict:
    """The value probe where the task has its items, else the correct-choice probe on the forget MCQs."""
    c = r.cfg
    if r.task.probe:
        probe = value_probe_attack(r.model, r.tokenizer, r.task.probe["items"], r.task.probe.get("extra", []),
                                   layers=c.probe_layers, seed=c.seed, C=c.probe_C)
    else:
        items = [{"question": m["question"], "choices": list(m["choices"]), "answer_index": m["answer_index"]}
                 for m in _choice_probe_items(r.task)]
        probe = linear_probe_attack(r.model, r.tokenizer, items, layers=c.probe_layers, train_frac=c.probe_train_frac,
                                    seed=c.seed, C=c.probe_C, prompt_fn=lambda q: r.task.prompt.prompt(q, r.tokenizer))
    return _probe_metrics(probe)


@register_attack("format_shift", "format_shift", lambda task: bool(variant_sets(task)))
def format_attack(r: AttackRun) -> dict:
    """The best score over the forget set's variants (read from the model's evaluation where given)."""
    return format_shift_attack(r.model, r.tokenizer, r.task, r.metrics)


def _forget_qa(task: Task) -> bool:
    return any(es.kind == "qa" for es in task.evals_by_role("forget", variants=False))


@register_attack("quantize", "quantize", lambda task: bool(task.evals_by_role("forget", variants=False)))
def quantize_run(r: AttackRun) -> dict:
    """The task's scores on quantized copies (:func:`~obliviate.attacks.quantize.quantize_attack`)."""
    return quantize_attack(r.model, r.tokenizer, scoring_task(r.task), r.cfg.quantize_schemes,
                           backend=r.cfg.quantize_backend)


@register_attack("ablate", "ablate", lambda task: bool(forget_prompts(task)) and bool(retain_prompts(task)))
def ablate_run(r: AttackRun) -> dict:
    """Direction ablation, and its white-box variant where the base model is given (its states computed once)."""
    base = None
    if r.base_model is not None:
        fp = forget_prompts(r.task, r.tokenizer)[:r.cfg.max_eval]
        base = r.on_base(("ablate_states", r.cfg.max_eval), lambda b: mean_last_states(b, r.tokenizer, fp))
    return ablation_attack(r.model, r.tokenizer, scoring_task(r.task), base_states=base, max_prompts=r.cfg.max_eval,
                           direction_task=r.task)


@register_attack("logit_lens", "logit_lens", _forget_qa)
def logit_lens_run(r: AttackRun) -> dict:
    return logit_lens_attack(r.model, r.tokenizer, r.task, max_items=r.cfg.max_eval)


@register_attack("in_context", "in_context", lambda task: task.forget_halves() is not None and bool(task.retain.qa))
def in_context_run(r: AttackRun) -> dict:
    return in_context_attack(r.model, r.tokenizer, r.task, r.cfg.in_context_k, seed=r.cfg.seed,
                             max_items=r.cfg.max_eval)


@register_attack("prompts", "prompts", _forget_qa)
def prompts_run(r: AttackRun) -> dict:
    return prompt_attack(r.model, r.tokenizer, r.task, max_items=r.cfg.max_eval)


@register_attack("unrelated_finetune", "unrelated_finetune", lambda task: bool(task.retain))
def unrelated_finetune_run(r: AttackRun) -> dict:
    """Fine-tuning on ``unrelated_n`` retain examples, one setting: the grid's largest full fine-tuning rate."""
    if r.score_fn is None:
        return {}
    rc = max((rc for _, rc in attack_grid(r.model, r.cfg) if not rc.lora), key=lambda rc: rc.lr)
    rc = replace(rc, steps=r.cfg.unrelated_steps, eval_every=max(1, r.cfg.unrelated_steps // 4),
                 batch_size=min(rc.batch_size, r.cfg.unrelated_n))
    return {**unrelated_finetune_attack(r.model, r.tokenizer, r.task, r.score_fn, rc, n=r.cfg.unrelated_n,
                                        seed=r.cfg.seed, base_acc=r.base_score), "unrelated_ft_lr": rc.lr}


@register_attack("gcg", "gcg", lambda task: task.forget_halves() is not None)
def gcg_run(r: AttackRun) -> dict:
    return gcg_attack(r.model, r.tokenizer, r.task, r.cfg.gcg_config)


@register_attack("leak_at_k", "leak_at_k", _forget_qa)
def leak_run(r: AttackRun) -> dict:
    cfg = r.cfg.leak_config
    return leak_attack(r.model, r.tokenizer, r.task, replace(cfg, max_items=min(cfg.max_items, r.cfg.max_eval)))


@register_attack("soft_prompt", "soft_prompt", lambda task: task.forget_folds() is not None)
def soft_prompt_run(r: AttackRun) -> dict:
    return soft_prompt_attack(r.model, r.tokenizer, r.task, r.cfg.soft_prompt_config)


@register_attack("prune", "prune", lambda task: bool(forget_prompts(task)) and bool(retain_prompts(task)))
def prune_run(r: AttackRun) -> dict:
    cfg = r.cfg.prune_config
    return prune_attack(r.model, r.tokenizer, r.task, replace(cfg, max_prompts=min(cfg.max_prompts, r.cfg.max_eval)))


@register_attack("gcg_prefix", "gcg_prefix", lambda task: task.forget_halves() is not None)
def gcg_prefix_run(r: AttackRun) -> dict:
    return prefix_attack(r.model, r.tokenizer, r.task, r.cfg.gcg_config)


def check_attackable(task: Task, cfg: TaskAttackConfig) -> None:
    """A one-line :class:`DataError` when no enabled attack has the data it needs on ``task`` (checked before any
    model is built or trained)."""
    if not any(getattr(cfg, a.enabled) and a.applies(task) for a in ATTACKS.values()):
        raise DataError(f"task {task.name!r} has no data for any attack: it needs a relearning corpus, forget QA "
                        "pairs (for the disjoint-halves attack), a holdout (membership inference) or forget MCQs "
                        "(for the probe)")


def run_task_attacks(model, tokenizer, task: Task, cfg: TaskAttackConfig | None = None, *, base_model=None,
                     base_score: float | None = None, metrics: dict | None = None, out_dir: str | Path | None = None,
                     resume: bool = True, base_cache: dict | None = None, timings: dict | None = None) -> dict:
    """Every registered attack (:data:`ATTACKS`) that is enabled and has its data; flat metrics (``model`` is
    never modified).

    ``metrics``: the model's own evaluation (:func:`~obliviate.eval.suite.evaluate_task`), which the format
    shift reads instead of scoring the variant sets again. ``base_model`` (or ``base_score``, its forget
    score) sets the target of ``*_steps_to_base``. Each relearning attack tries every setting of
    :func:`attack_grid`; the attacker chooses the setting and the step on a selection split and the score is
    read on facts that took no part in the choice (:func:`_selected_metrics`). Keys: ``relearn_*`` (corpus),
    ``relearn_disjoint_*`` (``_acc``: the held-out part B at the step chosen on V, mean over the folds;
    ``_acc_optimistic``: the best over settings and steps read on B itself; ``_start_acc``: B before;
    ``_leakage``: :func:`leakage_metrics`), ``recovery_cost_tokens`` / ``_bound`` / ``_flops``
    (:func:`~obliviate.attacks.relearn.recovery_cost`, the setting chosen on V: :func:`_cost`), ``learning_*``
    (:func:`_learning`; ``recovery_cost_vs_learning`` needs the oracle's: :func:`add_learning_ratios`), ``probe_acc`` /
    ``probe_best_layer`` / ``probe_chance``, ``mia_auc_<score>`` (:func:`obliviate.eval.mia.mia_metrics`),
    ``format_shift_acc`` / ``format_shift_set``, ``base_knows_forget`` and ``attacks_run``; ``attack_cost``:
    ``{attack: {forwards, backwards, tokens}}`` of ``model`` and every copy an attack made of it
    (:func:`~obliviate.attacks.cost.counting`; the base model's scoring is not the attack's). ``timings``: a dict
    that receives each attack's wall seconds (kept out of the metrics: the same seed gives the same metrics).
    ``base_cache``: a dict shared by the calls on one base model (a comparison's), so that its scores are
    computed once.
    """
    cfg = cfg or TaskAttackConfig()
    for layer in cfg.probe_layers or []:  # a bad layer fails now, not after the relearning attacks
        check_layer(model, layer)
    out: dict = {"attacks_run": [], "attack_score_chance": forget_chance(task), "attack_cost": {}}
    fn = forget_score_fn(tokenizer, task, cfg.max_eval)
    cache = {} if base_cache is None else base_cache
    if base_model is not None and fn is not None:
        key = (id(base_model), "forget", cfg.max_eval)
        if key not in cache:
            cache[key] = fn(base_model)
        base_score = cache[key]
    if base_score is not None:
        out["base_knows_forget"] = bool(base_score > KNOWS_MARGIN + forget_chance(task))
        if not out["base_knows_forget"] and is_main_process():
            log.warning("the base model does not know the forget set (forget score %.3f): there is nothing to "
                        "recover, so steps_to_base is null", base_score)
        if not out["base_knows_forget"]:
            base_model, base_score = None, None
    run = AttackRun(model, tokenizer, task, cfg, fn, base_model, base_score, metrics,
                    None if out_dir is None else Path(out_dir), resume, cache)
    for name, attack in ATTACKS.items():
        if getattr(cfg, attack.enabled) and attack.applies(task):
            t = time.time()
            with counting(model) as cost:
                res = attack.fn(run)
            if res:
                out.update(res)
                out["attacks_run"].append(name)
                out["attack_cost"][name] = cost.as_dict()
                if timings is not None:
                    timings[name] = time.time() - t
    if not out["attacks_run"]:
        raise DataError(f"task {task.name!r} has no data for any attack: it needs a relearning corpus, forget QA "
                        "pairs (for the disjoint-halves attack) or forget MCQs (for the probe)")
    return out
