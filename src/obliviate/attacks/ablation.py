"""Direction ablation: project one direction per layer out of the residual stream, then score the task.

Arditi et al. 2024, Łucki et al. 2024: per layer, ``r_l`` = mean forget-prompt minus mean retain-prompt
last-token hidden state (white-box: attacked minus base), and a hook replaces each layer's output h by ``h -
(h . r_l) r_l``. docs/evaluation.md, "Direction ablation".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.scoring import scoring_task
from obliviate.data import collate, encode_prompt_answer
from obliviate.errors import DataError
from obliviate.eval.suite import evaluate_task, qa_item_prompt
from obliviate.models.layers import decoder_layers, num_layers, states_over_batches
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import Task


def prompt_batches(tokenizer, prompts: Sequence[str], batch_size: int = 32, max_len: int = 256):
    """``{"input_ids", "attention_mask"}`` batches of ``[bos] + prompt`` (right-padded)."""
    seqs, _ = encode_prompt_answer(tokenizer, list(prompts), [""] * len(prompts), max_len, add_eos=False)
    pad = pad_id(tokenizer)
    return [collate(seqs[i:i + batch_size], pad) for i in range(0, len(seqs), batch_size)]


def mean_last_states(model, tokenizer, prompts: Sequence[str],
                     batch_size: int = 32) -> dict[int, torch.Tensor]:
    """``{l: mean hidden state (d,)}`` of every decoder layer at the prompts' last tokens (float32, CPU)."""
    if not prompts:
        raise DataError("direction ablation: no prompts to estimate a direction from")
    states = states_over_batches(model, prompt_batches(tokenizer, prompts, batch_size),
                                 range(num_layers(model)),
                                 at="last")
    return {l: h.mean(0) for l, h in states.items()}


def unit(v: torch.Tensor) -> torch.Tensor:
    n = v.norm()
    return v / n if n > 0 else v


def mean_difference_directions(model, tokenizer, forget_prompts: Sequence[str], retain_prompts: Sequence[str],
                               batch_size: int = 32) -> dict[int, torch.Tensor]:
    """``{l: unit(mean forget state - mean retain state)}`` per decoder layer (Arditi et al.'s difference of
    means)."""
    f = mean_last_states(model, tokenizer, forget_prompts, batch_size)
    r = mean_last_states(model, tokenizer, retain_prompts, batch_size)
    return {l: unit(f[l] - r[l]) for l in f}


def project_out(h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``h - (h . r) r`` along the last dimension, for a unit vector ``r`` (d,); h (..., d)."""
    r = r.to(device=h.device, dtype=h.dtype)
    return h - (h @ r)[..., None] * r


@contextlib.contextmanager
def ablating(model, directions: dict[int, torch.Tensor]) -> Iterator[None]:
    """Inside the block, decoder layer l's output has ``directions[l]`` (unit) projected out at every
    position."""
    stack = decoder_layers(model)
    handles = []

    def hook(_mod, _args, output, r):
        if isinstance(output, (tuple, list)):
            return type(output)((project_out(output[0], r), *output[1:]))
        return project_out(output, r)

    try:
        for l, r in directions.items():
            handles.append(stack[l].register_forward_hook(lambda m, a, o, r=r: hook(m, a, o, r)))
        yield
    finally:
        for h in handles:
            h.remove()


def forget_prompts(task: Task, tokenizer=None) -> list[str]:
    """The prompts of the task's forget QA sets (not their variants), else of its forget MCQ questions."""
    sets = task.evals_by_role("forget", variants=False)
    items = [x for es in sets if es.kind == "qa" for x in es.items]
    if items:
        return [qa_item_prompt(task, x, tokenizer) for x in items]
    return [task.prompt.prompt(x["question"], tokenizer) for es in sets if es.kind == "mcq" for x in es.items]


def retain_prompts(task: Task, tokenizer=None) -> list[str]:
    """Prompts of the retain-side questions: the task's retain QA pairs, else its retain/neighbour/utility
    sets."""
    if task.retain.qa:
        return [task.prompt.prompt(q, tokenizer) for q, _ in task.retain.qa]
    sets = [es for role in ("retain", "neighbour",
                            "utility") for es in task.evals_by_role(role, variants=False)
            if es.kind in ("qa", "mcq")]
    return [task.prompt.prompt(x["question"], tokenizer) for es in sets for x in es.items]


def _scores(prefix: str, m: dict) -> dict:
    """The role scores of evaluation ``m`` as ``<prefix>_<role>_score`` and, where it has a forget score, the
    read's counts (:func:`~obliviate.attacks.attack.read_counts`): the forget score's items, one variant
    (every layer's direction is ablated at once: one score, no maximum)."""
    out = {f"{prefix}_{k}": v for k, v in m.items() if k.endswith("_score")}
    if "forget_score" in m:
        out.update(read_counts(prefix, m["forget_items"]))
    return out


def ablation_attack(model, tokenizer, task: Task, base_model=None, *, base_states: dict | None = None,
                    direction_task: Task | None = None, max_prompts: int = 200, batch_size: int = 32) -> dict:
    """The task's role scores with the difference-of-means direction ablated (``ablate_<role>_score``) and,
    with ``base_model`` (or ``base_states``, its :func:`mean_last_states` on the forget prompts, computed once
    by the caller), with the white-box direction (``ablate_whitebox_<role>_score``); each read's ``_items`` /
    ``_variants`` (:func:`_scores`); ``ablate_cost``. ``direction_task``: the task whose prompts estimate the
    directions (default: ``task``, which is scored)."""
    dt = direction_task or task
    fp, rp = forget_prompts(dt, tokenizer)[:max_prompts], retain_prompts(dt, tokenizer)[:max_prompts]
    if not fp or not rp:
        raise DataError(f"task {task.name!r}: direction ablation needs forget and retain questions")
    cost = Cost()
    with counting(model, base_model, cost=cost):
        dirs = mean_difference_directions(model, tokenizer, fp, rp, batch_size)
        with ablating(model, dirs):
            out = _scores("ablate", evaluate_task(model, tokenizer, task, batch_size=batch_size))
        if base_model is not None and base_states is None:
            base_states = mean_last_states(base_model, tokenizer, fp, batch_size)
        if base_states is not None:
            mine = mean_last_states(model, tokenizer, fp, batch_size)
            with ablating(model, {l: unit(mine[l] - base_states[l]) for l in mine}):
                out.update(_scores("ablate_whitebox",
                                   evaluate_task(model, tokenizer, task, batch_size=batch_size)))
    out["ablate_cost"] = cost.as_dict()
    return out


@register_attack("ablate", needs="forget questions (QA pairs or MCQs) and "
                                 "retain questions to contrast them with",
                 applies=lambda task: bool(forget_prompts(task)) and bool(retain_prompts(task)),
                 reads=(AttackRead("forget_score", "ablate_forget_score", chance="forget_chance",
                                   label="difference-of-means direction projected out at every layer"),
                        AttackRead("forget_score", "ablate_whitebox_forget_score", chance="forget_chance",
                                   decides=False, name="ablate_whitebox",
                                   label="the direction unlearning moved along (needs the base model)")))
def ablate_run(r: AttackRun, cfg: None) -> dict:
    """Direction ablation, and its white-box variant where the base model is given (its states computed
    once)."""
    base = None
    if r.base_model is not None:
        fp = forget_prompts(r.task, r.tokenizer)[:r.cfg.max_eval]
        base = r.on_base(("ablate_states", r.cfg.max_eval), lambda b: mean_last_states(b, r.tokenizer, fp))
    return ablation_attack(r.model, r.tokenizer, scoring_task(r.task), base_states=base,
                           max_prompts=r.cfg.max_eval,
                           direction_task=r.task)
