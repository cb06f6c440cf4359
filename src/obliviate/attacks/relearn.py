"""Relearning attack: fine-tune a copy of the unlearned model and watch the knowledge come back.

:func:`relearn_attack` fine-tunes a deep copy with the one training loop for a fixed budget and
returns the recovery curve, its area, the final accuracy and the steps / tokens to the base model's
score. Definitions, the world's modes and a caveat: docs/evaluation.md, section "Attacks".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import resumable_cost_hooks
from obliviate.attacks.scoring import forget_items_fn
from obliviate.data import collate, encode_prompt_answer
from obliviate.errors import ConfigError, DataError
from obliviate.losses import lm_loss_labelled
from obliviate.methods import preset_name
from obliviate.models.tokenizer import bos_prefix, pad_id
from obliviate.train import StepSampler, TrainConfig, train

@dataclass
class RelearnConfig:
    steps: int = 30
    """Fine-tuning budget (optimizer steps)."""
    lr: float = 1e-3
    """AdamW learning rate, constant. 1e-3 suits the tiny world models (0.2-4M parameters); papers use
    1e-5 (EMBER) to 3e-5 (token filtering) on billion-parameter models."""
    weight_decay: float = 0.01
    batch_size: int = 8
    eval_every: int = 5
    """Evaluate every N steps (plus step 0 and the last step), with ``reads="every"``."""
    reads: str = "every"
    """When the curve is read: ``every`` (step 0, every ``eval_every`` steps and the last) or ``log``
    (:func:`log_steps`: 0, 1, 2, 3, 5, 8, 13, 21, 30 for 30 steps), which the recovery cost reads: a curve
    read every 5 steps cannot tell a model that comes back in one step from one that needs five."""
    lora: bool = False
    """Fine-tune LoRA adapters on every linear layer instead of all weights (merged at the end)."""
    lora_r: int = 8
    lora_alpha: float = 16.0
    max_len: int = 256
    """Longer training sequences are truncated to this many tokens."""
    seed: int = 0
    """Seeds the data order and the LoRA initialisation."""
    checkpoint_every: int = 0
    """With a run directory (``out_dir``), checkpoint every N steps: a killed attack resumes from the last one
    and ends exactly as an uninterrupted one (0: no checkpoints)."""
    progress: bool = False

    def __post_init__(self):
        for key in ("steps", "batch_size", "eval_every", "lora_r", "max_len", "checkpoint_every"):
            lo = 0 if key in ("steps", "checkpoint_every") else 1
            if getattr(self, key) < lo:
                raise ConfigError(f"config key '{key}': must be >= {lo}, got {getattr(self, key)}")
        if self.lr <= 0:
            raise ConfigError(f"config key 'lr': must be > 0, got {self.lr}")
        if self.reads not in READS:
            raise ConfigError(f"config key 'reads': must be one of {', '.join(READS)}, got {self.reads!r}")

    def read_steps(self) -> list[int]:
        """The steps at which the curve is read (0 and the last included)."""
        if self.reads == "log":
            return log_steps(self.steps)
        return sorted({0, self.steps, *range(0, self.steps, self.eval_every)})


READS = ("every", "log")
LOG_RATIO = 1.6
"""Each log-spaced read is about this many times the previous one's step."""


def log_steps(steps: int, ratio: float = LOG_RATIO) -> list[int]:
    """Log-spaced reads of a budget of ``steps``: 0, then from step 1 each read about ``ratio`` times the last
    (at least one step on), then the budget itself; a read within ``sqrt(ratio)`` of the budget is left to the
    budget's (0, 1, 2, 3, 5, 8, 13, 21, 30 for 30 steps; 0, 1, 2, 3, 6 for 6)."""
    if ratio <= 1:
        raise ValueError(f"ratio must be > 1, got {ratio}")
    out, s = [0], 1
    while s * ratio ** 0.5 < steps:
        out.append(s)
        s = max(s + 1, round(s * ratio))
    return out + ([steps] if steps > 0 else [])


# ------------------------------------------------------------------ curve metrics

def curve_auc(curve: Sequence[Sequence[float]]) -> float:
    """Trapezoid area under ``[(step, acc), ...]`` with steps rescaled to [0, 1] by the last step.

    Equals the mean accuracy over the budget; a single point (a zero-step budget) gives its accuracy.
    """
    if not curve:
        raise ValueError("empty recovery curve")
    steps = np.asarray([c[0] for c in curve], dtype=float)
    accs = np.asarray([c[1] for c in curve], dtype=float)
    if len(curve) == 1 or steps[-1] <= steps[0]:
        return float(accs[-1])
    x = (steps - steps[0]) / (steps[-1] - steps[0])
    return float(np.sum((x[1:] - x[:-1]) * (accs[1:] + accs[:-1]) / 2.0))


BOUNDS = ("exact", "at_most", "above_budget")
"""How a recovery cost is known: ``exact`` (at the first read that reaches the target; reads are log-spaced,
so it is within one read's step), ``at_most`` (reached by the first read after step 0: the cost is at most
that read's tokens, the curve cannot show less) and ``above_budget`` (never reached: the cost is more than the
budget's tokens, which ``recovery_cost_tokens`` then holds). A null cost (no bound) is *not applicable*, with
its reason."""


def recovery_cost(curves: Sequence[Sequence[Sequence[float]]], start: float | None, base: float | None,
                  n_params: int | None = None, *, higher_is_better: bool = True,
                  target: float | None = None) -> dict:
    """The one recovery cost: tokens to win back half of what the model lost, ``start + 0.5 (base - start)``
    (or ``target`` where given), read from the cheapest of ``curves`` that reaches it (each ``[(tokens seen,
    score), ...]`` from step 0, one per setting; the harness passes the one setting chosen on a validation
    part), and ``6 N tokens`` FLOPs with ``n_params`` N.

    The score rises to the base (an accuracy) or, with ``higher_is_better=False``, falls to it (a loss).
    ``recovery_cost_bound`` says how the cost is known (:data:`BOUNDS`): reached at the first read after step
    0 is ``at_most`` its tokens; never reached is ``above_budget``, with the budget's tokens
    (``recovery_budget_tokens``, the longest curve's last read). Null with ``recovery_cost_reason`` when it
    does not apply: nothing to recover (the base no better than the start) or either unknown."""
    budget = max((int(c[-1][0]) for c in curves if len(c)), default=None)
    out = {"recovery_cost_tokens": None, "recovery_cost_flops": None, "recovery_target": None,
           "recovery_cost_bound": None, "recovery_cost_reason": None, "recovery_budget_tokens": budget}
    sign = 1.0 if higher_is_better else -1.0
    if start is None or base is None:
        return {**out, "recovery_cost_reason": "no base score to recover towards"}
    if sign * (base - start) <= 1e-9:
        return {**out, "recovery_cost_reason": "nothing to recover: the model lost "
                                               "nothing against the base model"}
    if budget is None:
        return {**out, "recovery_cost_reason": "no relearning curve"}
    target = start + 0.5 * (base - start) if target is None else target
    found = []
    for c in curves:
        i = next((k for k, (_, v) in enumerate(c) if sign * (v - target) >= -1e-12), None)
        if i is not None:
            found.append((int(c[i][0]), "at_most" if i == 1 else "exact"))
    tokens, bound = min(found, key=lambda x: (x[0], x[1] != "exact"), default=(budget, "above_budget"))
    return {**out, "recovery_cost_tokens": tokens, "recovery_target": target, "recovery_cost_bound": bound,
            "recovery_cost_flops": None if n_params is None else 6.0 * n_params * tokens}


def cost_text(tokens: float | None, bound: str | None) -> str:
    """A recovery cost as the report shows it: ``≤ x`` (under the first read), ``> x`` (the budget: never
    reached), the number, or ``n/a``."""
    if tokens is None or bound is None:
        return "n/a"
    return {"at_most": f"≤ {tokens:.0f}", "above_budget": f"> {tokens:.0f}"}.get(bound, f"{tokens:.0f}")


RATIO_BOUNDS = ("exact", "at_least", "at_most")


def learning_ratio(learn: dict, relearn: dict) -> dict:
    """``recovery_cost_vs_learning``: the tokens the never-exposed model needs to learn the facts (``learn``)
    over the tokens a model needs to relearn them (``relearn``), both ``{"tokens", "bound"}`` of
    :func:`recovery_cost` read on the same data, settings and target. About 1: as if never seen; above 1: the
    knowledge comes back faster than it could be learned. A bound on either side makes the ratio a bound
    (``recovery_cost_vs_learning_bound`` ``at_least`` / ``at_most``); bounds that pull opposite ways, or a
    model at the target before any training, leave it null with ``recovery_cost_vs_learning_reason``."""
    out = {"recovery_cost_vs_learning": None, "recovery_cost_vs_learning_bound": None,
           "recovery_cost_vs_learning_reason": None}
    lt, lb, rt, rb = learn.get("tokens"), learn.get("bound"), relearn.get("tokens"), relearn.get("bound")
    if lt is None or lb is None:
        return {**out, "recovery_cost_vs_learning_reason": "no learning cost "
                                                           f"({learn.get('reason') or 'not run'})"}
    if rt is None or rb is None:
        return {**out, "recovery_cost_vs_learning_reason": "no relearning cost "
                                                           f"({relearn.get('reason') or 'not run'})"}
    if rt <= 0:
        return {**out, "recovery_cost_vs_learning_reason": "at the target before any "
                                                           "training: nothing to relearn"}
    if lt <= 0:
        return {**out, "recovery_cost_vs_learning_reason": "the never-exposed model "
                                                           "is at the target untrained"}
    # the true cost against the one shown: +1 above it (never reached), -1 at most it, 0 the cost itself
    dl = {"exact": 0, "at_most": -1, "above_budget": 1}[lb]
    dr = -{"exact": 0, "at_most": -1, "above_budget": 1}[rb]  # the relearning cost divides
    if dl and dr and dl != dr:
        why = ("neither reaches the target within the budget" if lb == rb == "above_budget"
               else "both reach the target at their first read" if lb == rb == "at_most"
               else "the bounds pull opposite ways")
        return {**out, "recovery_cost_vs_learning_reason": why}
    d = dl or dr
    return {**out, "recovery_cost_vs_learning": lt / rt,
            "recovery_cost_vs_learning_bound": {0: "exact", 1: "at_least", -1: "at_most"}[d]}


def ratio_text(ratio: float | None, bound: str | None) -> str:
    """``≥ x`` / ``≤ x`` / ``x`` (two decimals below 10), or ``n/a``."""
    if ratio is None or bound is None:
        return "n/a"
    return {"at_least": "≥ ", "at_most": "≤ "}.get(bound,
                                                   "") + (f"{ratio:.2f}" if ratio < 10 else f"{ratio:.0f}")


def steps_to_reach(curve: Sequence[Sequence[float]], target: float | None) -> int | None:
    """First step of ``curve`` whose accuracy is ``>= target``; None if never (or no target)."""
    if target is None:
        return None
    for step, acc in curve:
        if acc >= target:
            return int(step)
    return None


# ------------------------------------------------------------------ data

def _is_pairs(data: Sequence) -> bool:
    kinds = {isinstance(x, str) for x in data}
    if kinds == {True}:
        return False
    if kinds == {False} and all(len(x) == 2 and all(isinstance(s, str) for s in x) for x in data):
        return True
    raise DataError("relearning data must be a list of texts or a list of (prompt, answer) pairs, not a mix")


def _encode(tokenizer, data: Sequence, max_len: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids and loss masks: every token of a text (after bos), or the answer (+ eos) of a pair."""

    if _is_pairs(data):
        return encode_prompt_answer(tokenizer, [p for p, _ in data], [a for _, a in data], max_len)
    eos = tokenizer.eos_token_id
    head = bos_prefix(tokenizer)
    seqs, masks = [], []
    for text in data:
        ids = head + tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = (ids + ([eos] if eos is not None else []))[:max_len]
        seqs.append(np.asarray(ids, dtype=np.int64))
        masks.append(np.ones(len(ids), dtype=np.int64))
    return seqs, masks


def _lora_wrap(model, cfg: RelearnConfig):
    from peft import LoraConfig, get_peft_model

    lcfg = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules="all-linear",
                      bias="none")
    return get_peft_model(model, lcfg)


# ------------------------------------------------------------------ the attack

def _scores(value) -> dict:
    """The loop's record of one evaluation: ``attack_acc`` (the tracked score), and ``attack_<name>`` for each
    named score of a dict (the first one named is also ``attack_acc``)."""
    if isinstance(value, dict):
        if not value:
            raise ValueError("eval_fn returned no scores")
        first = next(iter(value.values()))
        return {"attack_acc": float(first), **{f"attack_{k}": float(v) for k, v in value.items()}}
    return {"attack_acc": float(value)}


def relearn_attack(model, tokenizer, train_data: Sequence, eval_fn: Callable[[torch.nn.Module], float],
                   cfg: RelearnConfig | None = None, out_dir: str | Path | None = None,
                   base_acc: float | None = None, *, keep_model: bool = False, resume: bool = True) -> dict:
    """Fine-tune a copy of ``model`` on ``train_data`` and record how ``eval_fn`` recovers.

    With ``out_dir`` the loop writes ``metrics.jsonl`` there and, with ``cfg.checkpoint_every``,
    checkpoints; a rerun into the same ``out_dir`` resumes from the last checkpoint (unless
    ``resume=False``) and returns exactly what an uninterrupted run returns (the curve before the
    checkpoint is read back from ``metrics.jsonl``).

    ``train_data``: texts (LM loss on every token) or ``(prompt, answer)`` pairs (loss on the answer tokens
    and eos only), e.g. ``(qa_prompt(q), " " + answer)``. ``eval_fn(model) -> float``: the accuracy to track;
    or a dict of named scores, each recorded as its own curve (``curves[name]``), the first named being the
    tracked one. ``model`` itself is never modified. Returns ``curve``, ``auc``, ``initial_acc``,
    ``final_acc``, ``base_acc``, ``steps_to_base``, ``tokens_to_base``, ``tokens_per_step`` (mean),
    ``tokens_at`` (tokens seen at each point of the curve), ``curves``, ``loss`` (``[[step, train loss],
    ...]``) and, with ``keep_model``, the fine-tuned ``model``.
    """

    cfg = cfg or RelearnConfig()
    if not train_data:
        raise DataError("no relearning data: the training set is empty")
    seqs, masks = _encode(tokenizer, train_data, cfg.max_len)
    pad = pad_id(tokenizer)
    sampler = StepSampler(len(seqs), cfg.batch_size, cfg.seed)
    device = next(model.parameters()).device

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        batch = collate([seqs[i] for i in idx], pad, label_mask=[masks[i] for i in idx])
        return {k: v.to(device) for k, v in batch.items()}

    def loss_fn(m, batch, step):
        return {"lm": lm_loss_labelled(m, batch)}  # logits at the labelled tokens only

    step_tokens = sampler.step_tokens([len(s) for s in seqs], cfg.steps)
    cum_tokens = np.concatenate([[0], np.cumsum(step_tokens)]).astype(int)

    tcfg = TrainConfig(steps=cfg.steps, lr=cfg.lr, weight_decay=cfg.weight_decay, schedule="constant",
                       warmup_steps=0, grad_clip=1.0, log_every=1, progress=cfg.progress, desc="relearn",
                       trainable=["*lora_*"] if cfg.lora else ["*"], checkpoint_every=cfg.checkpoint_every)
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(cfg.seed)
        attacked = copy.deepcopy(model)
        if cfg.lora:
            attacked = _lora_wrap(attacked, cfg)
        summary = train(attacked, loss_fn, batch_fn, tcfg, out_dir,
                        eval_fn=lambda m, s: _scores(eval_fn(m)), eval_every=cfg.eval_every,
                        eval_steps=set(cfg.read_steps()) if cfg.reads == "log" else None,
                        resume=resume, state_hooks=resumable_cost_hooks())
    history = summary["history"]
    if summary["resumed_from"] > 0:  # this process saw only the steps after the checkpoint
        import json

        lines = (Path(out_dir) / "metrics.jsonl").read_text().splitlines()
        history = [json.loads(line) for line in lines if line.strip()]
    curve = [[int(r["step"]), float(r["attack_acc"])] for r in history if "attack_acc" in r]
    names = [k[len("attack_"):] for k in next((r for r in history if "attack_acc" in r), {}) if
             k.startswith("attack_") and k != "attack_acc"]
    curves = {n: [[int(r["step"]),
                   float(r[f"attack_{n}"])] for r in history if f"attack_{n}" in r] for n in names}
    losses = [[int(r["step"]), float(r["loss"])] for r in history if "loss" in r]
    reached = steps_to_reach(curve, base_acc)
    out = {
        "curve": curve,
        "auc": curve_auc(curve),
        "initial_acc": curve[0][1],
        "final_acc": curve[-1][1],
        "base_acc": base_acc,
        "steps_to_base": reached,
        "tokens_to_base": None if reached is None else int(cum_tokens[reached]),
        "tokens_per_step": float(np.mean(step_tokens)) if step_tokens else 0.0,
        "tokens_at": [int(cum_tokens[s]) for s, _ in curve],
        "curves": curves,
        "loss": losses,
    }
    if keep_model:
        if cfg.lora:
            attacked = attacked.merge_and_unload()
        attacked.eval()
        out["model"] = attacked
    return out


# The relearning attacker: its grid, its choice of setting and step, and the attack on the related corpus.

@dataclass
class RelearnAttackConfig(RelearnConfig):
    """``attacks.relearn``: the relearning attacker's training settings (:class:`RelearnConfig`, which
    ``relearn_disjoint`` and ``unrelated_finetune`` train with too) and the related-corpus attack's own
    grid."""

    lr_grid: list[float] | None = None
    """Learning rates of the related-corpus attack, where they differ from ``attacks.lr_grid`` (default:
    that)."""

    def __post_init__(self):
        super().__post_init__()
        check_grid(self.lr_grid, "lr_grid")


def check_grid(grid: list[float] | None, key: str) -> None:
    """A one-line :class:`ConfigError` unless ``grid`` (None: the default) holds finite learning rates > 0."""
    if grid is not None and (not grid or any(not 0 < lr < float("inf") for lr in grid)):
        raise ConfigError(f"config key '{key}': needs finite learning rates > 0, got {grid}")


LR_GRIDS = {"tiny": (1e-4, 3e-4, 1e-3), "paper": (1e-5, 3e-5, 1e-4)}


def attack_grid(model, cfg, lrs: list[float] | None = None) -> list[tuple[str, RelearnConfig]]:
    """The attacker's settings: full fine-tuning at each learning rate of the grid, and LoRA (``cfg.lora``);
    ``cfg``: the :class:`~obliviate.evidence.harness.TaskAttackConfig` (its ``relearn`` section is the
    training).

    The grid (``lrs``, else ``cfg.lr_grid``) defaults by model size (:func:`obliviate.methods.preset_name`):
    1e-4, 3e-4, 1e-3 for tiny models, 1e-5, 3e-5, 1e-4 for larger ones; LoRA uses the largest rate.
    """
    lrs = lrs or cfg.lr_grid or list(LR_GRIDS[preset_name(model)])
    train = RelearnConfig(**{f.name: getattr(cfg.relearn, f.name) for f in fields(RelearnConfig)})
    grid = [(f"lr{lr:g}", replace(train, lr=lr, lora=False)) for lr in lrs]
    if cfg.lora:
        grid.append((f"lora-lr{max(lrs):g}", replace(train, lr=max(lrs), lora=True)))
    return grid


def n_params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def mean_curves(curves: list[list]) -> list[list]:
    """Pointwise mean of recovery curves evaluated at the same steps."""
    return [[c[0][0], float(np.mean([p[1] for p in c]))] for c in zip(*curves)]


def pick(runs: list[tuple[str, dict, list, list]]) -> tuple[str, int, float, float]:
    """The attacker's choice among ``(tag, result, V curve, B curve)``: the setting and the step with the
    highest score on the selection split V (ties: the earlier step, then the earlier setting of the grid);
    returns ``(tag, step, V score, B score there)``."""
    best = None
    for order, (tag, _, v, b) in enumerate(runs):
        for (step, sv), (_, sb) in zip(v, b):
            key = (sv, -step, -order)
            if best is None or key > best[0]:
                best = (key, tag, int(step), float(sv), float(sb))
    return best[1:]


def selected_metrics(prefix: str, folds: list[list[tuple[str, dict, list, list]]],
                     base: float | None) -> dict:
    """What an attack reports from its folds, each a list of ``(tag, result, V curve, B curve)`` per setting.

    ``<prefix>_acc``: B's score at the setting and step chosen on V (:func:`pick`), the mean over folds
    (unbiased: B never entered the choice); ``<prefix>_acc_optimistic``: the best B score over every setting
    and step (chosen on B itself, an upward-biased number); ``<prefix>_curve``: the mean of the chosen
    settings' B curves, which ``_start_acc``, ``_final_acc``, ``_auc``, ``_steps_to_base`` and
    ``_tokens_to_base`` read; ``<prefix>_setting`` / ``<prefix>_best_step``: each fold's choice;
    ``<prefix>_by_setting``: each setting's last B score (mean over folds); ``<prefix>_budget_limited``: a
    fold chose the budget's last step while its V curve was still rising at that read (more steps would have
    brought back more; ``_budget_limited_folds`` counts them)."""
    picks = [pick(runs) for runs in folds]
    chosen = [next(run for run in runs if run[0] == tag) for runs, (tag, *_) in zip(folds, picks)]
    limited = [p[1] == run[2][-1][0] and len(run[2]) > 1 and run[2][-1][1] > run[2][-2][1]
               for p, run in zip(picks, chosen)]
    curve = mean_curves([run[3] for run in chosen])
    tokens_per_step = float(np.mean([run[1]["tokens_per_step"] for run in chosen]))
    steps = steps_to_reach(curve, base)
    tags = [run[0] for run in folds[0]]
    return {f"{prefix}_acc": float(np.mean([p[3] for p in picks])),
            f"{prefix}_acc_optimistic": float(np.mean([max(sb for *_, b in runs for _,
                                                           sb in b) for runs in folds])),
            f"{prefix}_final_acc": curve[-1][1], f"{prefix}_start_acc": curve[0][1],
            f"{prefix}_auc": curve_auc(curve),
            f"{prefix}_steps_to_base": steps, f"{prefix}_tokens_to_base": None if steps is None
            else int(steps * tokens_per_step), f"{prefix}_base_acc": base, f"{prefix}_curve": curve,
            f"{prefix}_tokens_per_step": tokens_per_step,
            f"{prefix}_setting": [p[0] for p in picks], f"{prefix}_best_step": [p[1] for p in picks],
            f"{prefix}_budget_limited": any(limited), f"{prefix}_budget_limited_folds": int(sum(limited)),
            f"{prefix}_by_setting": {t: float(np.mean([runs[i][3][-1][1] for runs in folds]))
                                     for i, t in enumerate(tags)}}


def _part_curve(res: dict, parts: list[int], sizes: list[int]) -> list:
    """The curve of the union of ``parts`` (each ``p<i>`` curve of ``res``, weighted by its size)."""
    total = sum(sizes[i] for i in parts)
    c = [res["curves"][f"p{i}"] for i in parts]
    return [[pts[0][0], sum(sizes[i] * p[1] for i, p in zip(parts, pts)) / total] for pts in zip(*c)]


def tracked_relearning(r: AttackRun, prefix: str, data: Sequence, grid: list[tuple[str, RelearnConfig]],
                       folder: str) -> dict:
    """Relearning on ``data`` (texts or ``(prompt, answer)`` pairs, never forget items) at each setting of
    ``grid``, the forget items every relearning attack tracks read along the way; the metrics of attack
    ``prefix`` (the related-corpus attack's, the retain-only one's). Each setting's run is kept under
    ``r.run_dir / <folder>-<setting>``.

    The forget items it scores (:func:`~obliviate.attacks.scoring.forget_items_fn`, at most ``max_eval``) are
    cut into three seeded parts; each in turn is the selection split V (the setting and step are chosen on it)
    and the other two are B, where the score is read (``<prefix>_selection`` ``"V"``,
    :func:`selected_metrics`). With fewer than 3 items there is no V: ``<prefix>_acc`` is then the best over
    settings and steps of every item, ``<prefix>_selection`` ``"optimistic"``.

    Its counts (:func:`~obliviate.attacks.attack.read_counts`): ``<prefix>_items`` the n distinct forget items
    scored. ``<prefix>_acc`` is the mean over the three folds of B's score, and each item is in B in two
    folds, so it is a mean over the n items with equal weights (within 1/n where 3 does not divide n); an
    item's two scores are not independent draws, so it counts once, not twice. ``<prefix>_variants``: 1 with
    V (B never enters the choice); without V, the distinct models ``<prefix>_acc`` is the best of on the same
    items, every setting's reads after step 0 and the one untrained model they share at step 0. Empty where
    the task has no forget items to track."""
    found = forget_items_fn(r.tokenizer, r.task, r.cfg.max_eval)
    if found is None:
        return {}
    items, n = found
    parts = np.array_split(np.random.default_rng(r.cfg.seed).permutation(n), 3) if n >= 3 else []
    sizes = [len(p) for p in parts]

    def fn(model) -> dict:
        c = items(model)
        return {"all": float(np.mean(c)), **{f"p{i}": float(np.mean(c[p])) for i, p in enumerate(parts)}}

    tried = [(tag, relearn_attack(r.model, r.tokenizer, data, fn, rc, base_acc=r.base_score,
                                  out_dir=None if r.run_dir is None else r.run_dir / f"{folder}-{tag}",
                                  resume=r.resume))
             for tag, rc in grid]
    if parts:
        folds = [[(tag, res, res["curves"][f"p{i}"], _part_curve(res, [j for j in range(3) if j != i], sizes))
                  for tag, res in tried] for i in range(3)]
    else:
        folds = [[(tag, res, res["curve"], res["curve"]) for tag, res in tried]]
    out = selected_metrics(prefix, folds, r.base_score)
    variants = 1 if parts else 1 + sum(len(res["curve"]) - 1 for _, res in tried)
    return {**out, f"{prefix}_selection": "V" if parts else "optimistic", **read_counts(prefix, n, variants)}


@register_attack("relearn", needs="a related corpus: texts about the forget "
                                  "facts to fine-tune on (--relearn FILE)",
                 applies=lambda task: bool(task.relearn), config=RelearnAttackConfig,
                 reads=AttackRead("relearn_start_acc", "relearn_acc", "relearn_base_acc",
                                  label="relearning on the related corpus"))
def corpus_attack(r: AttackRun, cfg: RelearnAttackConfig) -> dict:
    """Relearning on the task's related corpus, at each setting of the corpus grid, the forget items tracked,
    the setting and step chosen on a selection part of them (:func:`tracked_relearning`, whose counts it
    records: ``relearn_items``, ``relearn_variants``)."""
    return tracked_relearning(r, "relearn", list(r.task.relearn), attack_grid(r.model, r.cfg, cfg.lr_grid),
                              "corpus")
