"""The controls that calibrate the attacks: models known to hold the forget knowledge and only hide it.

The positive controls only suppress the forget data: the base model with its last decoder layer trained to
refuse (:func:`suppression_control`), or moved a little by gradient ascent within its int4 rounding cells
(:func:`small_norm_control`), each trained to keep the retain and neighbour answers and recording how much of
them it kept against the base model (:func:`keep_summary`); the oracle, which never saw the forget data, is
the negative control. How they are read, and the verdict rule: :mod:`obliviate.evidence.verdict` and
docs/evaluation.md (Controls).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch
from tqdm.auto import tqdm

from obliviate.attacks.quantize import quantizable, rtn_quantize
from obliviate.attacks.scoring import split_score_fn
from obliviate.data import IDENTITY_PROMPT, collate, encode_data
from obliviate.errors import ConfigError, DataError
from obliviate.eval.outcome import RETAIN_SHARE
from obliviate.eval.suite import evaluate_task
from obliviate.losses import lm_loss
from obliviate.methods import method_defaults, preset_name
from obliviate.models.layers import num_layers, param_names_for
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import IDK_ANSWERS, UNSCORED_NEIGHBOURS, Data, Task
from obliviate.train.config import TrainConfig
from obliviate.train.sampler import StepSampler
from obliviate.unlearning.engine import UnlearnConfig, unlearn


def suppression_qa(task: Task) -> list[tuple[str, str]]:
    """The forget questions a positive control learns to refuse: the forget QA pairs, or the forget-role QA
    evaluation items when the forget data are documents."""
    qa = list(task.forget.qa) or [(x["question"],
                                   x["answer"]) for es in task.evals_by_role("forget", variants=False)
                                  if es.kind == "qa" for x in es.items]
    if not qa:
        raise DataError(f"task {task.name!r} has no forget questions to build a suppression control on")
    return qa


KEEP_ROLES = ("retain", "neighbour")
"""The roles whose scores a selective positive control keeps (:func:`keep_summary`)."""
MONITORED_RETAIN = 64
"""Retain pairs (a seeded sample) whose prefix match the controls record after every chunk."""


SCORED_NEIGHBOURS = ("all", "half", "none")
"""How many of the scored neighbour items a positive control trains on (:func:`neighbour_training`)."""


def neighbour_training(task: Task, seed: int = 0, scored: str = "all",
                       by_entity: bool = False) -> tuple[list[tuple[str, str]], set, str]:
    """``(pairs, held, source)``: the neighbour QA pairs a control trains on to keep the forget data's
    neighbourhood, the scored neighbour questions among them (which its keep score must skip), and where they
    come from.

    Training on the neighbour items that the neighbour score reads contaminates it: a control taught an item
    answers it by construction, whether or not its suppression is selective. So the pairs are first the task's
    unscored neighbours (``task.meta[UNSCORED_NEIGHBOURS]``; the world: the holdout diseases' spread routes
    and look-alikes, pretrained, never scored). These alone do not teach the boundary that matters: on world
    seed 0 a refusal learnt with them still takes the forget diseases' look-alikes (Zalitis beside the forget
    disease Zalosis) with it (look-alike exact match 0.03 when the forget match reaches 0.03).
    ``scored="all"`` (the default) adds every neighbour-role QA item: the control then keeps the neighbourhood
    because it was shown it, which is what a positive control is for (a model that hides the forget facts and
    nothing else, so that an attack calibrated on it finds selectively hidden facts), and ``held`` is empty:
    its neighbour keep is read on trained items (on the world, untrained look-alikes keep only 0.37-0.53 of
    the base model's: the tiny models do not tell a look-alike from its forget disease unless shown it).
    ``scored="half"`` adds a seeded half (``by_entity``: whole entities, each item's ``meta["entity"]``; by
    default item by item), ``held`` names their questions and :func:`keep_summary` reads the neighbour score
    on the other half, the items the control never saw; ``"none"``: the unscored neighbours alone."""
    pairs = list(task.meta.get(UNSCORED_NEIGHBOURS) or [])
    sources = ["unscored neighbours"] if pairs else []
    held: set = set()
    items = [x for es in task.evals_by_role("neighbour", variants=False) if es.kind == "qa" for x in es.items]
    if scored not in SCORED_NEIGHBOURS:
        raise ConfigError("a positive control's scored neighbours must "
                          f"be one of {SCORED_NEIGHBOURS}, got {scored!r}")
    if scored == "all" and items:
        pairs += [(x["question"], x["answer"]) for x in items]
        sources.append("every neighbour QA item (their keep is read on trained items)")
    elif scored == "half" and len(items) >= 2:
        groups: dict = {}
        for i, x in enumerate(items):
            meta = (x.get("meta") if isinstance(x, dict) else getattr(x, "meta", None)) or {}
            groups.setdefault(meta.get("entity", f"#{i}") if by_entity else i, []).append(i)
        keys = list(groups)
        chosen: list[int] = []
        for j in np.random.default_rng(seed).permutation(len(keys)):
            if len(chosen) >= len(items) // 2:
                break
            chosen += groups[keys[j]]
        half = [(items[i]["question"], items[i]["answer"]) for i in sorted(chosen)]
        pairs += half
        held = {q for q, _ in half}
        sources.append("a seeded half of the neighbour QA "
                       f"items{', by entity' if by_entity else ''} (the other half scored)")
    return pairs, held, " + ".join(sources) or "none"


def keep_task(task: Task, held: set = frozenset()) -> Task | None:
    """The task's scored retain and neighbour sets (not their variants), without the neighbour questions in
    ``held``: what :func:`keep_summary` scores. None when the task has neither."""
    evals = []
    for es in task.evals:
        if es.role not in KEEP_ROLES or es.variant or es.kind not in ("qa", "mcq"):
            continue
        if es.role == "neighbour" and held:
            items = [x for x in es.items if x["question"] not in held]
            if not items:
                continue
            es = dataclasses.replace(es, items=items)
        evals.append(es)
    return dataclasses.replace(task, evals=evals, meta={}) if evals else None


def keep_summary(control, base, tokenizer, task: Task, held: set = frozenset(), batch_size: int = 32) -> dict:
    """What a positive control kept: ``{"keep": {role: control / base}, "keep_scores": {role: {"control",
    "base"}}}`` of the retain and neighbour role scores (:func:`~obliviate.eval.suite.evaluate_task` on
    :func:`keep_task`; a ratio is None where the base scores 0). Empty when the task has no such set."""

    kt = keep_task(task, held)
    if kt is None:
        return {}
    c, b = (evaluate_task(m, tokenizer, kt, batch_size=batch_size) for m in (control, base))
    roles = [r for r in KEEP_ROLES if b.get(f"{r}_score") is not None]
    return {"keep": {r: (c[f"{r}_score"] / b[f"{r}_score"] if b[f"{r}_score"] > 0 else None) for r in roles},
            "keep_scores": {r: {"control": c[f"{r}_score"], "base": b[f"{r}_score"]} for r in roles}}


def monitor_fn(tokenizer, task: Task, qa: list, neighbours: list, seed: int = 0):
    """``fn(model) -> {"forget", "retain", "neighbours"}``: the prefix match of the forget questions (``qa``,
    at most 200), of :data:`MONITORED_RETAIN` retain pairs and of as many of the trained ``neighbours``
    (seeded samples), in one pass; a split without pairs is left out. ``fn(model, forget_only=True)`` reads
    the forget questions alone (the cheap read of a chunk whose forget match already says to go on)."""
    rng = np.random.default_rng(seed)

    def sample(pairs: list) -> list:
        pairs = list(pairs)
        return pairs if len(pairs) <= MONITORED_RETAIN else [pairs[i] for i in sorted(
            rng.permutation(len(pairs))[:MONITORED_RETAIN])]

    splits = {k: v for k, v in {"forget": qa[:200], "retain": sample(task.retain.qa),
                                 "neighbours": sample(neighbours)}.items() if v}
    both = split_score_fn(tokenizer, task, splits)
    forget = split_score_fn(tokenizer, task, {"forget": splits["forget"]}) if "forget" in splits else None

    def fn(model, forget_only: bool = False) -> dict:
        return forget(model) if forget_only and forget is not None else both(model)

    return fn


KEEP_TARGET = RETAIN_SHARE
"""The refusal control trains on until its retain and trained-neighbour prefix match are back to this share of
the base model's (as well as the forget match at its target): a mixed refusal first takes in the neighbours
and only then learns where the forget questions end. (0.95 kept world seed 2 training past a forget match of
0.07 with its 64 monitored neighbours at 0.92, to the 600-step limit.)"""


REFUSAL_KEEP_SHARE = 0.5
"""The share of the refusal control's training rows that are kept answers (retain and neighbour pairs, with
their true answers), the rest refusals of the forget questions."""


def shared_openings(answers: list[str], kept: list[str]) -> list[str]:
    """For each of ``answers``, its longest opening of whole words that also opens one of the ``kept`` answers
    (never the whole answer; "" where none): the frame a forget answer shares with the answers a control keeps
    ("It is treated with" on the world), which the control leaves alone so that only the rest, the part that
    is the forget fact's own, is hidden."""
    opens = {tuple(k.split()[:i]) for k in kept for i in range(1, len(k.split()) + 1)}
    out = []
    for a in answers:
        words = a.split()
        n = next((i for i in range(len(words) - 1, 0, -1) if tuple(words[:i]) in opens), 0)
        out.append(" ".join(words[:n]))
    return out


def frame_pairs(task: Task, tokenizer, qa: list, kept: list, replace: list[str] | None = None) -> list:
    """Formatted ``(prompt, answer)`` pairs of the forget ``qa`` whose trained part starts after the opening
    each answer shares with the ``kept`` answers (:func:`shared_openings`; the whole answer where it shares
    none): the opening goes into the prompt. ``replace``: answers to train in place of that part (refusals,
    used in turn), else the rest of the forget answer."""
    frames = shared_openings([a for _, a in qa], [a for _, a in kept])
    out = []
    for i, ((q, a), frame) in enumerate(zip(qa, frames)):
        p = task.prompt.prompt(q, tokenizer)
        rest = replace[i % len(replace)] if replace else a[len(frame):].strip()
        out.append((p + task.prompt.answer(frame), " " + rest) if frame else (p, task.prompt.answer(rest)))
    return out


def suppression_data(task: Task, tokenizer=None, seed: int = 0, keep_share: float = REFUSAL_KEEP_SHARE,
                     scored_neighbours: str = "all") -> tuple[Data, dict]:
    """The refusal control's training data, formatted pairs: each forget question (:func:`suppression_qa`)
    with a refusal, mixed with every retain QA pair of the task and its neighbour pairs
    (:func:`neighbour_training`, ``scored_neighbours``) with their true answers, so that the refusal stays on
    the forget questions. The refusal comes after the opening the forget answer shares with the kept answers
    (:func:`shared_openings`: "It is treated with I don't know."), trained from there: where the answer turns
    to the forget fact's own, which is where a model's hidden state holds which entity it is about (a refusal
    at the first answer token cannot tell a forget disease from its look-alike). The refusals are repeated
    (whole copies, at least one) to make about ``1 - keep_share`` of the rows. Returns ``(data, info)``:
    ``info`` has the counts, ``neighbour_source``, ``neighbours`` (the neighbour pairs) and ``held`` (the
    scored neighbour questions trained on, which the keep score skips)."""
    if not 0 < keep_share < 1:
        raise ConfigError(f"the refusal control's keep_share must be in (0, 1), got {keep_share}")
    idk = task.idk or IDK_ANSWERS
    qa = suppression_qa(task)
    neighbours, held, source = neighbour_training(task, seed, scored_neighbours)
    keep = list(task.retain.qa) + neighbours
    fmt = lambda q, a: (task.prompt.prompt(q, tokenizer), task.prompt.answer(a))
    refusals = frame_pairs(task, tokenizer, qa, keep, replace=idk)
    framed = sum(bool(f) for f in shared_openings([a for _, a in qa], [a for _, a in keep]))
    copies = max(1, round((1 - keep_share) / keep_share * len(keep) / len(refusals)))
    pairs = refusals * copies + [fmt(q, a) for q, a in keep]
    return Data(qa=pairs), {"refusals": len(refusals), "refusal_copies": copies,
                            "retain_pairs": len(task.retain.qa),
                            "neighbour_pairs": len(neighbours), "neighbour_source": source,
                            "neighbours": neighbours,
                            "refused_after_frame": framed, "held": held}


def train_rows(model, tokenizer, data: Data, params: list[str], *, lr: float, batch_size: int, seed: int,
               chunk: int, max_steps: int, done, grad_clip: float = 1.0, bar=None) -> int:
    """Train the parameters ``params`` of ``model`` (in place) on the formatted pairs of ``data`` (loss on the
    answers), one optimizer (AdamW, constant ``lr``: a linear decay to a tenth left world seeds 1 and 2 at a
    forget match of 0.2 after 400 steps) across chunks of ``chunk`` steps, until ``done(model, steps)`` is
    true after a chunk or ``max_steps``; returns the steps taken. Batches are uniform draws of the rows (not
    length-grouped: a refusal and a true answer differ in length, and grouped batches would alternate between
    all refusals and no refusal). ``bar``: a progress bar over ``max_steps``, moved after each chunk."""
    ids, masks, _ = encode_data(tokenizer, data, IDENTITY_PROMPT)
    sampler = StepSampler(len(ids), batch_size, seed)
    named = dict(model.named_parameters())
    for name, p in named.items():
        p.requires_grad_(name in params)
    trained = [named[n] for n in params]
    opt = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    device, pad = trained[0].device, pad_id(tokenizer)
    steps = 0
    try:
        while not done(model, steps) and steps < max_steps:
            model.train()
            for _ in range(min(chunk, max_steps - steps)):
                idx = sampler(steps)
                batch = {k: v.to(device) for k, v in
                         collate([ids[i] for i in idx], pad, label_mask=[masks[i] for i in idx]).items()}
                loss = lm_loss(model, batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trained, grad_clip)
                opt.step()
                steps += 1
                if bar is not None:
                    bar.update(1)
            model.eval()
    finally:
        for p in named.values():
            p.requires_grad_(True)
        model.eval()
    return steps


def control_bar(max_steps: int, desc: str, progress: bool):
    """The bar of a control's training: at most ``max_steps`` steps (it often stops earlier), on a terminal
    only."""
    return tqdm(total=max_steps, desc=desc, disable=not progress, leave=False)


def suppression_control(model, tokenizer, task: Task, *, max_steps: int = 600, chunk: int = 10,
                        lr: float = 3e-3,
                        batch_size: int = 16, target: float = 0.1, keep_share: float = REFUSAL_KEEP_SHARE,
                        keep_target: float = KEEP_TARGET, scored_neighbours: str = "all", layers: int = 1,
                        seed: int = 0, progress: bool = False):
    """A copy of ``model`` whose last decoder layer answers the forget questions with a refusal and every
    other question as before (module doc): the layer is fine-tuned on the forget questions with refusals mixed
    with the retain and neighbour pairs with their true answers (:func:`suppression_data`: ``keep_share`` of
    the rows; ``scored_neighbours``: :func:`neighbour_training`), so that the control hides the forget answers
    and keeps the rest, as a selective unlearning method would.

    Trained (:func:`train_rows`) in chunks of ``chunk`` steps until the forget questions' prefix-match
    accuracy is at most ``target`` and the trained retain and neighbour pairs' are back to ``keep_target`` of
    ``model``'s (:data:`KEEP_TARGET`), or ``max_steps``: the least training that hides the answers and nothing
    else. ``model`` is not modified; ``progress``: a bar over the steps (on a terminal). Returns ``(control,
    summary)``; the summary records the prefix match of the forget, retain and trained neighbour pairs after
    each chunk (``curve``) and what the control kept against ``model`` (:func:`keep_summary`: ``keep``,
    ``keep_scores``).
    """
    data, dinfo = suppression_data(task, tokenizer, seed, keep_share, scored_neighbours)
    held, neighbours = dinfo.pop("held"), dinfo.pop("neighbours")
    monitor = monitor_fn(tokenizer, task, suppression_qa(task), neighbours, seed)
    ref = monitor(model)
    control = copy.deepcopy(model)
    n = num_layers(control)
    last = param_names_for(control, "layer", list(range(max(0, n - layers), n)))
    curve: list[dict] = []

    def done(m, steps: int) -> bool:  # the kept pairs are read once the forget match is at its target
        s = monitor(m, forget_only=True)
        if s["forget"] <= target:
            s = monitor(m)
        curve.append({"steps": steps, **s})
        bar.set_postfix(forget=f"{s['forget']:.2f}", refresh=False)
        return s["forget"] <= target and all(s[k] >= keep_target * ref[k] - 1e-9
                                             for k in ref if k != "forget")

    with control_bar(max_steps, "positive control (refusal)", progress) as bar:
        steps = train_rows(control, tokenizer, data, last, lr=lr, batch_size=batch_size, seed=seed,
                           chunk=chunk,
                           max_steps=max_steps, done=done, bar=bar)
    if curve[-1]["steps"] != steps:
        curve.append({"steps": steps, **monitor(control)})
    elif set(ref) - set(curve[-1]):
        curve[-1] = {"steps": steps, **monitor(control)}
    s = curve[-1]
    return control, {"trained": "last decoder layer: refusals mixed with retain and neighbour answers",
                     "parameters": len(last), "steps": steps, "lr": lr, "keep_share": keep_share, **dinfo,
                     "forget_prefix_acc": s["forget"], "retain_prefix_acc": s.get("retain"), "curve": curve,
                     **keep_summary(control, model, tokenizer, task, held)}


SMALL_NORM_LR_SHARE = 1 / 3
"""The small-norm control's learning rate: this share of gradient ascent's preset rate for the model's size
(1e-4 on the world's tiny models: a tenth took 350 steps on world seed 0 where a third takes 160, with the
same keep; the int4 confinement, not the rate, keeps the update small)."""


CELL_MARGIN = 0.45
"""A confined weight stays within this many rounding steps of its base code (0.5 is the cell's edge)."""


@torch.no_grad()
def rounding_cells(model, scheme: str = "int4") -> dict:
    """Per quantized weight of ``model`` (:func:`~obliviate.attacks.quantize.quantizable`; ``int4`` / ``int8``
    round-to-nearest per output channel): the interval each element may move in and still round to the same
    code under the same scale, ``(lo, hi, keep)``, in the module's own weight layout; ``keep`` marks each
    channel's absmax element, which must not move (it sets the scale)."""
    if scheme not in ("int4", "int8"):
        raise ConfigError(f"config key 'small_norm_args.confine': must be int4, int8 or null, got {scheme!r}")
    cells = {}
    for name, m in quantizable(model):
        conv = type(m).__name__ == "Conv1D"
        w = (m.weight.t() if conv else m.weight).float()
        q, scale = rtn_quantize(w, int(scheme[3]))
        q, scale = q.float().reshape(w.shape), scale.reshape(w.shape[0], 1)
        absmax = w.abs().amax(dim=1, keepdim=True)  # no element may pass it: the scale would change
        lo, hi = ((q - CELL_MARGIN) * scale).clamp(min=-absmax), ((q + CELL_MARGIN) * scale).clamp(max=absmax)
        keep = torch.zeros_like(w, dtype=torch.bool)
        keep[torch.arange(w.shape[0]), w.abs().argmax(dim=1)] = True
        lo, hi = torch.where(keep, w, lo), torch.where(keep, w, hi)
        cells[name] = (lo.t(), hi.t(), conv) if conv else (lo, hi, conv)
    return cells


@torch.no_grad()
def confine_to(model, cells: dict) -> None:
    """Clamp every weight of ``cells`` (:func:`rounding_cells`) into its interval, in place."""
    for name, m in quantizable(model):
        lo, hi, _ = cells[name]
        m.weight.copy_(torch.maximum(torch.minimum(m.weight.float(), hi.to(m.weight.device)),
                                     lo.to(m.weight.device)).to(m.weight.dtype))


FULL_READ_EVERY = 5
"""The small-norm control reads its retain and neighbour pairs every this many chunks and at its last (the
forget questions after every chunk: they decide when it stops)."""


SMALL_NORM_MAX_RETAIN_WEIGHT = 160.0
"""The small-norm control doubles its retain weight after a read that finds the kept pairs below the keep
target, up to this (four doublings of :data:`SMALL_NORM_RETAIN_WEIGHT`)."""


SMALL_NORM_RETAIN_WEIGHT = 10.0
"""The weight of the small-norm control's retain term (GradDiff's ``alpha``: NLL on the retain and neighbour
pairs; GradDiff's own tiny preset). On world seed 0, 1 kept 0.33 of the held-out neighbours, 10 kept 0.53."""


def small_norm_control(model, tokenizer, task: Task, *, lr: float | None = None, chunk: int = 10,
                       max_steps: int = 400, target: float = 0.1, batch_size: int = 16, seed: int = 0,
                       retain_weight: float = SMALL_NORM_RETAIN_WEIGHT, keep_target: float = KEEP_TARGET,
                       own_part: bool = True,
                       scored_neighbours: str = "all", confine: str | None = "int4", progress: bool = False):
    """A copy of ``model`` whose forget answers were pushed away by the smallest full-model update that hides
    them and keeps the rest: gradient ascent on the forget set with a retain term (``graddiff``, through the
    method engine's one training loop: ``-CE(forget) + retain_weight * NLL(retain)``, the retain data being
    the task's retain pairs and its neighbour pairs, :func:`neighbour_training`) at a low learning rate
    (``lr``, default :data:`SMALL_NORM_LR_SHARE` of gradient ascent's preset rate), in chunks of ``chunk``
    steps, stopped as soon as the forget questions' prefix-match accuracy is at most ``target`` and the
    monitored retain and neighbour pairs are at ``keep_target`` of ``model``'s (or at ``max_steps``); a read
    that finds them below doubles the retain weight (up to :data:`SMALL_NORM_MAX_RETAIN_WEIGHT`), so the
    control stays selective. ``retain_weight=0`` is plain gradient ascent (``gradascent``), which on the world
    takes the retain facts with it (seed 0: retain score 0.01 against the base model's 0.90). With
    ``own_part`` the ascent is on the part of each forget answer after the opening it shares with the kept
    answers (:func:`frame_pairs`): the shared frame ("It is treated with") is not pushed down for every
    disease. ``scored_neighbours``: as :func:`neighbour_training`.

    The mechanism it stands for: every weight moves a little (Adam moves each by about ``lr`` a step), so the
    update is small against a 4-bit rounding step (per channel: absmax / 7) and rounding maps most weights
    back to the base model's codes, which is how Zhang et al. 2024 explain quantization undoing GA and NPO. On
    a tiny model that is not small enough by itself (a 2 x 96 Llama: 205 steps at 3e-5 moved the weights by
    11% of their norm and 4-bit rounding kept the suppression), so with ``confine`` (default ``int4``) each
    chunk ends by clamping every quantized weight into its base code's rounding cell (:func:`rounding_cells`,
    within :data:`CELL_MARGIN` of a step; each channel's absmax element fixed): the update is then exactly
    what 4-bit round-to-nearest maps back to the base model's weights, retain term or not. The summary records
    the update's size: ``update_rel_norm`` (||dW|| / ||W|| over the quantized Linear weights) and
    ``update_max_abs``, the forget prefix match after each chunk and the retain and trained-neighbour ones
    after every :data:`FULL_READ_EVERY`-th and the last (``curve``) and what the control kept against
    ``model`` (:func:`keep_summary`: ``keep``, ``keep_scores``). ``model`` is not modified. Returns
    ``(control, summary)``."""
    qa = suppression_qa(task)
    if lr is None:
        lr = SMALL_NORM_LR_SHARE * method_defaults("gradascent", preset_name(model))["lr"]
    if lr <= 0 or chunk < 1 or max_steps < 1 or not retain_weight >= 0:
        raise ConfigError("the small-norm control needs lr > 0, chunk >= 1, max_steps >= 1 and retain_weight "
                          f">= 0, got lr={lr}, chunk={chunk}, max_steps={max_steps}, "
                          f"retain_weight={retain_weight}")
    neighbours, held, source = neighbour_training(task, seed, scored_neighbours)
    kept = list(task.retain.qa) + neighbours
    forget = frame_pairs(task, tokenizer, qa, kept) if own_part else \
        [(task.prompt.prompt(q, tokenizer), task.prompt.answer(a)) for q, a in qa]
    retain = Data(qa=[(task.prompt.prompt(q, tokenizer), task.prompt.answer(a)) for q, a in kept],
                  docs=list(task.retain.docs))
    monitor = monitor_fn(tokenizer, task, qa, neighbours, seed)
    adapt = retain_weight > 0 and bool(retain)
    method, weight = ("graddiff", retain_weight) if adapt else ("gradascent", 0.0)
    control = copy.deepcopy(model)
    cells = rounding_cells(model, confine) if confine else None
    steps, ref = 0, monitor(control)
    curve = [{"steps": 0, **ref}]
    s, kept = ref, True
    with control_bar(max_steps, "positive control (small norm)", progress) as bar:
        while not (s["forget"] <= target and kept) and steps < max_steps:
            n = min(chunk, max_steps - steps)
            ucfg = UnlearnConfig(method=method, params={"alpha": weight} if adapt else {},
                                 batch_size=batch_size,
                                 seed=seed + steps,
                                 train=TrainConfig(steps=n, lr=lr, schedule="constant", warmup_steps=0,
                                                   grad_clip=1.0,
                                                   log_every=n, desc="small-norm control"))
            control, _ = unlearn(control, tokenizer, forget, retain, ucfg, prompt=IDENTITY_PROMPT,
                                 progress=False)
            if cells is not None:
                confine_to(control, cells)
            steps += n
            bar.update(n)
            s = monitor(control, forget_only=(steps // chunk) % FULL_READ_EVERY != 0)
            if "retain" in ref and "retain" not in s and (s["forget"] <= target or steps >= max_steps):
                s = monitor(control)
            if adapt and set(ref) <= set(s):  # a full read: below the keep target, the retain term doubles
                kept = all(s[k] >= keep_target * ref[k] - 1e-9 for k in ref if k != "forget")
                weight = weight if kept else min(weight * 2, SMALL_NORM_MAX_RETAIN_WEIGHT)
            curve.append({"steps": steps, "retain_weight": weight, **s})
            bar.set_postfix(forget=f"{s['forget']:.2f}", refresh=False)
    base_w = {n: m.weight.detach() for n, m in quantizable(model)}
    num = den = 0.0
    top = 0.0
    for n, m in quantizable(control):
        d = (m.weight.detach() - base_w[n]).float()
        num += float(d.pow(2).sum())
        den += float(base_w[n].float().pow(2).sum())
        top = max(top, float(d.abs().max()))
    return control, {"trained": f"every layer, gradient ascent on the forget set"
                                f"{' with a retain term' if method == 'graddiff' else ''}", "method": method,
                     "retain_weight": retain_weight if adapt else 0.0, "final_retain_weight": weight,
                     "neighbour_pairs": len(neighbours), "neighbour_source": source, "steps": steps, "lr": lr,
                     "chunk": chunk, "confine": confine,
                     "forget_prefix_acc": s["forget"], "retain_prefix_acc": s.get("retain"), "curve": curve,
                     "update_rel_norm": math.sqrt(num / den) if den else None, "update_max_abs": top,
                     **keep_summary(control, model, tokenizer, task, held)}


POSITIVE_CONTROLS = {"positive_control": "the last decoder layer trained to refuse the forget questions",
                     "positive_control_smallnorm": "a small-norm full-model gradient ascent, stopped as soon "
                                                   "as the forget answers vanish"}
"""The suppression controls a comparison builds, by their metrics name: the knowledge is known to be in the
weights."""


MECHANISM = {"positive_control_smallnorm": ("quantize",)}
"""Attacks whose own mechanism a control was built to match (the small-norm control is confined to the very
int4 cells that 4-bit rounding maps back): such a control calibrates that attack by construction, so it does
not alone calibrate it (:mod:`obliviate.evidence.verdict`)."""
