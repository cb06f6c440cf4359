"""The one attack suite, for every task (the world included): :func:`run_task_attacks`.

Relearning on the task's related corpus and on disjoint halves of the forget facts, membership
inference, a linear probe and the format shift, each where the task has its data (docs/evaluation.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
import sys
from pathlib import Path

import numpy as np

from obliviate.attacks.ablation import ablation_attack, forget_prompts, retain_prompts
from obliviate.attacks.finetune_unrelated import unrelated_finetune_attack
from obliviate.attacks.format_shift import format_shift_attack, variant_sets
from obliviate.attacks.gcg import GCGConfig, gcg_attack
from obliviate.attacks.in_context import in_context_attack
from obliviate.attacks.logit_lens import logit_lens_attack
from obliviate.attacks.probe import linear_probe_attack, value_probe_attack
from obliviate.attacks.prompts import prompt_attack
from obliviate.attacks.quantize import quantize_attack
from obliviate.attacks.relearn import RelearnConfig, curve_auc, relearn_attack, steps_to_reach
from obliviate.errors import ConfigError, DataError
from obliviate.eval.answers import answer_matches
from obliviate.eval.core import mcq_accuracy, qa_accuracy
from obliviate.eval.mia import mia_metrics
from obliviate.eval.suite import answer_budget
from obliviate.methods import preset_name
from obliviate.models.layers import check_layer
from obliviate.registry import Registry
from obliviate.tasks.base import Task
from obliviate.train.distributed import is_main_process


@dataclass
class TaskAttackConfig:
    relearn: RelearnConfig = field(default_factory=RelearnConfig)
    corpus: bool = True
    """Relearn on the task's related corpus, where it has one."""
    disjoint: bool = True
    """Relearn on one half of the forget QA facts, test on the other, and swap."""
    probe: bool = True
    """Linear probe on the forget MCQs, where the task has them."""
    probe_layers: list[int] | None = None
    """Decoder layers to probe (default: all)."""
    lr_grid: list[float] | None = None
    """Learning rates the attacker tries (the best result is reported, as an adversary would); default by
    model size, see :func:`attack_grid`. They replace ``relearn.lr``; the other ``relearn`` keys apply."""
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

    def __post_init__(self):
        if not 0 < self.probe_train_frac < 1:
            raise ConfigError(f"config key 'probe_train_frac': must be in (0, 1), got {self.probe_train_frac}")
        if self.max_eval < 1:
            raise ConfigError(f"config key 'max_eval': must be >= 1, got {self.max_eval}")
        for key in ("lr_grid", "corpus_lr_grid"):
            grid = getattr(self, key)
            if grid is not None and (not grid or any(not 0 < lr < float("inf") for lr in grid)):
                raise ConfigError(f"config key '{key}': needs finite learning rates > 0, got {grid}")


def qa_score_fn(tokenizer, task: Task, qa: Sequence[tuple[str, str]], batch_size: int = 32) -> Callable:
    """``fn(model)`` = greedy prefix-match accuracy on ``qa`` (question, answer) in the task's prompt format."""
    if not qa:
        raise DataError("no questions to score the relearning attack on")
    prompts = [task.prompt.prompt(q, tokenizer) for q, _ in qa]
    answers = [a for _, a in qa]
    budget = answer_budget(tokenizer, answers)

    def fn(model) -> float:
        r = qa_accuracy(model, tokenizer, prompts, answers, prompt_fn=lambda p: p, max_new_tokens=budget,
                        batch_size=batch_size)
        return float(np.mean([answer_matches(p, a, "prefix") for p, a in zip(r["predictions"], answers)]))

    return fn


def forget_score_fn(tokenizer, task: Task, max_eval: int = 200, batch_size: int = 32) -> Callable | None:
    """The forget score a relearning attack tracks: forget QA (prefix match), else forget MCQ accuracy (the
    forget sets themselves, not their variants)."""
    forget = task.evals_by_role("forget", variants=False)
    qa = [(x["question"], x["answer"]) for es in forget if es.kind == "qa" for x in es.items]
    if qa:
        return qa_score_fn(tokenizer, task, qa[:max_eval], batch_size)
    mcqs = [m for es in forget if es.kind == "mcq" for m in es.items][:max_eval]
    if not mcqs:
        return None
    styles = {es.mcq_style for es in forget if es.kind == "mcq"}
    style = styles.pop() if len(styles) == 1 else "letters"
    items = [{"question": m["question"], "choices": list(m["choices"]), "answer_index": m["answer_index"]}
             for m in mcqs]
    return lambda model: mcq_accuracy(model, tokenizer, items, style=style, batch_size=batch_size,
                                      context_fn=lambda m: task.prompt.prompt(m["question"], tokenizer))["accuracy"]


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


def _curve_metrics(prefix: str, res: dict) -> dict:
    return {f"{prefix}_acc": res["final_acc"], f"{prefix}_start_acc": res["initial_acc"], f"{prefix}_auc": res["auc"],
            f"{prefix}_steps_to_base": res["steps_to_base"], f"{prefix}_tokens_to_base": res["tokens_to_base"],
            f"{prefix}_base_acc": res["base_acc"], f"{prefix}_curve": res["curve"],
            f"{prefix}_tokens_per_step": res.get("tokens_per_step")}


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


def _disjoint(model, tokenizer, task: Task, halves, rc: RelearnConfig, max_eval: int, base_model, run_dir,
              resume: bool) -> dict:
    """Relearn on half A, score half B, then the other way round; the mean of the two curves."""
    results = []
    for i, (train_half, test_half) in enumerate((halves, halves[::-1])):
        half_fn = qa_score_fn(tokenizer, task, list(test_half)[:max_eval])
        target = half_fn(base_model) if base_model is not None else None
        pairs = task.prompt.pairs(list(train_half), tokenizer)
        results.append(relearn_attack(model, tokenizer, pairs, half_fn, rc, base_acc=target,
                                      out_dir=None if run_dir is None else run_dir / str(i), resume=resume))
    curve = _mean_curves([r["curve"] for r in results])
    base_acc = None if base_model is None else float(np.mean([r["base_acc"] for r in results]))
    tokens_per_step = float(np.mean([r["tokens_per_step"] for r in results]))
    steps = steps_to_reach(curve, base_acc)
    return {"final_acc": curve[-1][1], "initial_acc": curve[0][1], "auc": curve_auc(curve), "curve": curve,
            "base_acc": base_acc, "steps_to_base": steps, "tokens_per_step": tokens_per_step,
            "tokens_to_base": None if steps is None else int(steps * tokens_per_step)}


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


def recovery_cost(res: dict, n: int) -> dict:
    """Tokens (and FLOPs, 6 N tokens) the attacker needs to bring back half of the base model's forget score on
    the held-out halves: the first evaluated step of the curve at or above ``base_acc / 2``; null when the budget
    ran out first (or the base score is unknown)."""
    if res.get("base_acc") is None:
        return {"recovery_cost_tokens": None, "recovery_cost_flops": None}
    step = steps_to_reach(res["curve"], 0.5 * res["base_acc"])
    tokens = None if step is None else int(step * res["tokens_per_step"])
    return {"recovery_cost_tokens": tokens, "recovery_cost_flops": None if tokens is None else 6.0 * n * tokens,
            "recovery_budget_tokens": int(res["curve"][-1][0] * res["tokens_per_step"])}


def probe_mcqs(task: Task) -> list:
    """The forget MCQs the choice probe reads: those of the forget sets, else of their first variant set."""
    sets = [es for es in task.evals_by_role("forget", variants=False) if es.kind == "mcq"]
    sets = sets or [es for es in task.evals_by_role("forget") if es.kind == "mcq"][:1]
    return [m for es in sets for m in es.items]


def _probe_metrics(probe: dict) -> dict:
    return {"probe_acc": probe["best_acc"], "probe_best_layer": probe["best_layer"], "probe_chance": probe["chance"],
            "probe_per_layer": {str(l): a for l, a in probe["per_layer"].items()}}


def _mean_curves(curves: list[list]) -> list[list]:
    """Pointwise mean of recovery curves evaluated at the same steps."""
    return [[c[0][0], float(np.mean([p[1] for p in c]))] for c in zip(*curves)]


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


def _best(tried: list[tuple[RelearnConfig, dict]]) -> tuple[RelearnConfig, dict]:
    """The attacker's best setting: the highest final forget score (then the larger area under the curve)."""
    return max(tried, key=lambda t: (t[1]["final_acc"], t[1]["auc"]))


@register_attack("relearn", "corpus", lambda task: bool(task.relearn))
def corpus_attack(r: AttackRun) -> dict:
    """Relearning on the task's related corpus, at each setting of the corpus grid."""
    if r.score_fn is None:
        return {}
    tried = [(rc, relearn_attack(r.model, r.tokenizer, list(r.task.relearn), r.score_fn, rc, base_acc=r.base_score,
                                 out_dir=None if r.run_dir is None else r.run_dir / f"corpus-{tag}", resume=r.resume))
             for tag, rc in attack_grid(r.model, r.cfg, r.cfg.corpus_lr_grid)]
    best_cfg, res = _best(tried)
    return {**_curve_metrics("relearn", res), "relearn_lr": best_cfg.lr, "relearn_lora": best_cfg.lora}


@register_attack("relearn_disjoint", "disjoint", lambda task: task.forget_halves() is not None)
def disjoint_attack(r: AttackRun) -> dict:
    """Relearning on one half of the forget facts, scored on the other (both ways), at each setting."""
    halves = r.task.forget_halves(r.cfg.seed)
    if halves is None or not all(halves):
        return {}
    grid = attack_grid(r.model, r.cfg)
    tried = [(rc, _disjoint(r.model, r.tokenizer, r.task, halves, rc, r.cfg.max_eval, r.base_model,
                            None if r.run_dir is None else r.run_dir / f"disjoint-{tag}", r.resume))
             for tag, rc in grid]
    best_cfg, res = _best(tried)
    return {**_curve_metrics("relearn_disjoint", res), "relearn_disjoint_lr": best_cfg.lr,
            "relearn_disjoint_lora": best_cfg.lora,
            "relearn_disjoint_by_setting": {tag: res_["final_acc"] for (tag, _), (_, res_) in zip(grid, tried)},
            **recovery_cost(res, n_params(r.model))}


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
    return quantize_attack(r.model, r.tokenizer, r.task, r.cfg.quantize_schemes, backend=r.cfg.quantize_backend)


@register_attack("ablate", "ablate", lambda task: bool(forget_prompts(task)) and bool(retain_prompts(task)))
def ablate_run(r: AttackRun) -> dict:
    """Direction ablation, and its white-box variant where the base model is given."""
    return ablation_attack(r.model, r.tokenizer, r.task, base_model=r.base_model, max_prompts=r.cfg.max_eval)


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


def run_task_attacks(model, tokenizer, task: Task, cfg: TaskAttackConfig | None = None, *, base_model=None,
                     base_score: float | None = None, metrics: dict | None = None, out_dir: str | Path | None = None,
                     resume: bool = True) -> dict:
    """Every registered attack (:data:`ATTACKS`) that is enabled and has its data; flat metrics (``model`` is
    never modified).

    ``metrics``: the model's own evaluation (:func:`~obliviate.eval.suite.evaluate_task`), which the format
    shift reads instead of scoring the variant sets again. ``base_model`` (or ``base_score``, its forget
    score) sets the target of ``*_steps_to_base``. Each relearning attack tries every setting of
    :func:`attack_grid` and reports the best for the attacker (highest final forget score), with the setting
    it took (``*_lr``, ``*_lora``). Keys: ``relearn_*`` (corpus), ``relearn_disjoint_*`` (``_acc``: held-out
    half after relearning, averaged over both swaps; ``_start_acc``: the same halves before),
    ``recovery_cost_tokens`` / ``recovery_cost_flops`` (:func:`recovery_cost`), ``probe_acc`` /
    ``probe_best_layer`` / ``probe_chance``, ``mia_auc_<score>`` (:func:`obliviate.eval.mia.mia_metrics`),
    ``format_shift_acc`` / ``format_shift_set``, ``base_knows_forget`` and ``attacks_run``.
    """
    cfg = cfg or TaskAttackConfig()
    for layer in cfg.probe_layers or []:  # a bad layer fails now, not after the relearning attacks
        check_layer(model, layer)
    out: dict = {"attacks_run": []}
    fn = forget_score_fn(tokenizer, task, cfg.max_eval)
    if base_model is not None and fn is not None:
        base_score = fn(base_model)
    if base_score is not None:
        out["base_knows_forget"] = bool(base_score > KNOWS_MARGIN + forget_chance(task))
        if not out["base_knows_forget"] and is_main_process():
            print(f"obliviate: warning: the base model does not know the forget set (forget score {base_score:.3f}): "
                  "there is nothing to recover, so steps_to_base is null", file=sys.stderr)
        if not out["base_knows_forget"]:
            base_model, base_score = None, None
    run = AttackRun(model, tokenizer, task, cfg, fn, base_model, base_score, metrics,
                    None if out_dir is None else Path(out_dir), resume)
    for name, attack in ATTACKS.items():
        if getattr(cfg, attack.enabled) and attack.applies(task):
            res = attack.fn(run)
            if res:
                out.update(res)
                out["attacks_run"].append(name)
    if not out["attacks_run"]:
        raise DataError(f"task {task.name!r} has no data for any attack: it needs a relearning corpus, forget QA "
                        "pairs (for the disjoint-halves attack) or forget MCQs (for the probe)")
    return out
