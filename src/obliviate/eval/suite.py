"""Evaluation of a model on a :class:`~obliviate.tasks.Task`: every evaluation set, then one score per role.

Each key it writes (``<set>_em``, ``<set>_acc``, ``<set>_loss``, ``<role>_score``, ``heldout_keep_score``,
...) and why it is computed so: docs/evaluation.md, "Metrics". A metric over zero items or tokens is never a
number: it is left out, and ``absent`` (metric key -> one line) says why; registered metrics come from
:func:`task_metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from obliviate.data import clip_chars, collate, encode_data, encode_prompt_answer
from obliviate.errors import ConfigError
from obliviate.eval.answers import answer_token_budget
from obliviate.eval.core import (answer_probs, check_logits, fit_context, mcq_accuracy, model_max_length,
                                 normalise_text, qa_accuracy, s_unlearning)
from obliviate.eval.metric import METRICS, MetricRun, left_out, requested_metrics
from obliviate.eval.mia import GRADNORM_P
from obliviate.losses import token_nll
from obliviate.models.layers import evaluating
from obliviate.models.tokenizer import adds_bos, pad_id
from obliviate.tasks.base import SCORED_ROLES, Data, EvalSet, Task
from obliviate.tasks.benchmark import benchmark_task

PRIMARY = {"qa": "em", "mcq": "acc"}


def answer_budget(tokenizer, answers, slack: int = 4, cap: int = 256) -> int:
    """Greedy tokens for exact match: the longest reference answer plus ``slack``, at most ``cap``."""
    return answer_token_budget(tokenizer, answers, slack, cap)


def _meta(item) -> dict:
    meta = item.get("meta") if isinstance(item, dict) else getattr(item, "meta", None)
    return meta if isinstance(meta, dict) else {}


def qa_item_prompt(task: Task, item, tokenizer=None) -> str:
    """The prompt of a QA item in the task's format, followed by the start of its answer where the item gives
    one (``meta["answer_start"]``: a cloze item, whose answer is the value that completes it)."""
    prompt = task.prompt.prompt(item["question"], tokenizer)
    start = _meta(item).get("answer_start")
    return prompt + task.prompt.answer(start) if start else prompt


def qa_correct(prediction: str, item, match: str = "exact") -> bool:
    """Whether a greedy answer is right: equal (normalised) to the answer or one of ``meta["alternatives"]``,
    or, with ``match="prefix"``, starting with its words."""
    refs = [item["answer"], *_meta(item).get("alternatives", [])]
    if match == "prefix":
        return any(starts_with_words(prediction, a) for a in refs)
    return normalise_text(prediction) in {normalise_text(a) for a in refs}


def starts_with_words(prediction: str, answer: str) -> bool:
    """True if the normalised prediction's first words are the normalised answer's words."""
    want = normalise_text(answer).split()
    return bool(want) and normalise_text(prediction).split()[:len(want)] == want


def _prompt_of(item) -> str | None:
    """The prompt a text item continues (MUSE's verbmem: ``meta["prompt"]``), or None for a plain text."""
    prompt = item.get("prompt")
    if isinstance(prompt, str):
        return prompt
    meta = item.get("meta")
    return meta.get("prompt") if isinstance(meta, dict) else None


NO_TOKENS = "no token to score"
"""The start of the reason a text metric is absent: nothing was left to score."""


def absent_reason(what: str, why: str) -> str:
    """The one line saying why the metric ``what`` is absent (recorded under ``absent`` in the metrics)."""
    return f"{what}: not computed, {why}"


@torch.no_grad()
@evaluating
def text_loss(model, tokenizer, texts: list[str], max_len: int = 256, batch_size: int = 16,
              prompts: list[str | None] | None = None) -> dict:
    """Mean next-token loss over the tokens of ``texts``: every token of ``bos + text + eos`` (in windows of
    ``max_len`` tokens, at most the model's context), or, where ``prompts[i]`` is given, only the continuation
    ``texts[i]`` (and its eos) after its prompt.

    A continuation is scored in the model's whole context (:func:`~obliviate.eval.core.model_max_length`), not
    in ``max_len``: a prompt that does not fit with its continuation is cut from the left (keeping bos), so
    the continuation is always scored (MUSE's verbmem prompts are ~1,400 tokens); only a continuation longer
    than the context alone keeps its first tokens. Returns ``{"loss", "ppl", "tokens", "prompts_cut"}``; with
    no token to score, ``{"tokens": 0, "absent": reason}`` and no loss (never a loss of 0 over nothing)."""
    if not texts:
        return {"tokens": 0, "absent": f"{NO_TOKENS}: no texts"}
    limit = model_max_length(model)
    window = min(max_len, limit) if limit else max_len
    prompts = prompts or [None] * len(texts)
    plain = [t for t, p in zip(texts, prompts) if p is None]
    seqs, masks, _ = encode_data(tokenizer, Data(docs=plain), max_len=window) if plain else ([], [], {})
    seqs, masks = list(seqs), list(masks)
    cont = [(p, t) for t, p in zip(texts, prompts) if p is not None]
    n_cut = 0
    if cont:
        bos = tokenizer.bos_token_id if adds_bos(tokenizer) else None
        s2, m2 = encode_prompt_answer(tokenizer, [clip_chars(p, limit) for p, _ in cont],
                                      [clip_chars(t, limit, "start") for _, t in cont], max_len=10 ** 9)
        for seq, mask in zip(s2, m2):
            p_ids, a_ids = seq[mask == 0].tolist(), seq[mask == 1].tolist()
            p_ids, a_ids, cut = fit_context(p_ids, a_ids, limit, bos)
            n_cut += cut
            seqs.append(np.asarray(p_ids + a_ids, dtype=np.int64))
            masks.append(np.asarray([0] * len(p_ids) + [1] * len(a_ids), dtype=np.int64))
    dev = next(model.parameters()).device
    pad = pad_id(tokenizer)
    total, count = 0.0, 0
    order = np.argsort([len(s) for s in seqs])
    for i in range(0, len(seqs), batch_size):
        idx = order[i:i + batch_size]
        batch = collate([seqs[j] for j in idx], pad, label_mask=[masks[j] for j in idx])
        logits = model(input_ids=batch["input_ids"].to(dev),
                       attention_mask=batch["attention_mask"].to(dev)).logits
        check_logits(logits, batch["attention_mask"].to(dev), "token loss")
        nll, mask = token_nll(logits, batch["labels"].to(dev))
        total += float(nll[mask].double().sum())
        count += int(mask.sum())
    if count == 0:
        return {"tokens": 0, "prompts_cut": n_cut,
                "absent": f"{NO_TOKENS}: the {len(texts)} texts left no token after their prompts"}
    loss = total / count
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": count, "prompts_cut": n_cut}


def effective_items(sizes: list[int]) -> int:
    """The item count of a mean of ``len(sizes)`` set accuracies over ``sizes`` items each, as one binomial
    sees it: ``k^2 / sum(1 / n_i)`` (the count whose binomial variance the mean has at a common rate), rounded
    down; a single set's own size."""
    sizes = [n for n in sizes if n > 0]
    return 0 if not sizes else int(len(sizes) ** 2 / sum(1 / n for n in sizes) + 1e-9)


def evaluate_set(model, tokenizer, task: Task, es: EvalSet, *, batch_size: int = 32,
                 max_new_tokens: int | None = None,
                 max_len: int = 256, progress: bool = False) -> dict:
    """The metrics of one evaluation set, keyed without the set's name (``em``, ``acc``, ``loss``...)."""
    if es.kind == "qa":
        answers = [x["answer"] for x in es.items]
        prompts = [qa_item_prompt(task, x, tokenizer) for x in es.items]
        budget = max_new_tokens or answer_budget(tokenizer, answers)
        r = qa_accuracy(model, tokenizer, prompts, answers, prompt_fn=lambda p: p, max_new_tokens=budget,
                        batch_size=batch_size, progress=progress, answer_fn=task.prompt.answer)
        correct = [float(qa_correct(p, x, es.match)) for p, x in zip(r["predictions"], es.items)]
        out, absent = {"em": float(np.mean(correct)), "rouge_l": r["rouge_l"]}, {}
        probs = [p for p in r["answer_probs"] if math.isfinite(p)]  # an answer with no token has none
        if probs:
            out["prob"] = float(np.mean(probs))
        else:
            absent["prob"] = f"{NO_TOKENS}: none of the {len(answers)} answers has a token"
        if all(_options(x) for x in es.items) and probs:
            out["option_prob"] = option_prob(model, tokenizer, task, es.items, prompts, r["answer_probs"],
                                             batch_size)
        return {**out, "_absent": absent, "_correct": correct, "_predictions": r["predictions"]}
    if es.kind == "mcq":
        items = [{"question": m["question"], "choices": list(m["choices"]), "answer_index": m["answer_index"],
                  "description": _meta(m).get("description", "")} for m in es.items]
        r = mcq_accuracy(model, tokenizer, items, style=es.mcq_style, batch_size=batch_size,
                         context_fn=lambda m: task.prompt.prompt(m["question"], tokenizer), progress=progress)
        norm = {"acc_norm": r["accuracy_norm"]} if "accuracy_norm" in r else {}
        return {"acc": r["accuracy"], **norm, "chance": es.chance, "_correct": r["correct"],
                "_predictions": r["predictions"]}
    r = text_loss(model, tokenizer, [x["text"] for x in es.items], max_len=max_len, batch_size=batch_size,
                  prompts=[_prompt_of(x) for x in es.items])
    if "absent" in r:
        return {"_absent": {"loss": r["absent"], "ppl": r["absent"]}}
    return {"loss": r["loss"], "ppl": r["ppl"], "tokens": r["tokens"],
            **({"prompts_cut": r["prompts_cut"]} if r["prompts_cut"] else {})}


def _options(item) -> list | None:
    return item.get("options") if isinstance(item, dict) else getattr(item, "options", None)


def option_prob(model, tokenizer, task: Task, items, prompts: list[str], probs: list[float],
                batch_size: int = 32) -> float:
    """Mean over items of P(answer) / (P(answer) + sum of P(option) over the other options), each P the
    answer probability after the item's prompt (``probs``: the answers' own)."""
    wrong = [[o for o in _options(x) if o != x["answer"]] for x in items]
    flat = answer_probs(model, tokenizer, [p for p, w in zip(prompts, wrong) for _ in w],
                        [task.prompt.answer(o) for w in wrong for o in w], batch_size)
    sizes = np.cumsum([len(w) for w in wrong])[:-1]
    return float(np.mean([p / (p + float(np.sum(w))) for p,
                          w in zip(probs, np.split(np.asarray(flat), sizes))]))


def evaluate_task(model, tokenizer, task: Task, *, batch_size: int = 32, max_new_tokens: int | None = None,
                  max_len: int = 256, progress: bool = False, details: bool = False) -> dict:
    """Flat metrics of ``model`` on every evaluation set of ``task`` and one score per role (module
    docstring).

    A metric that would be computed over zero items or tokens (a text set whose every token was cut, answers
    without a token), or that the task asks for by name without the data it reads, is left out, and ``absent``
    maps its key to the one line saying why.

    With ``details``, ``_per_item`` holds each QA/MCQ set's per-item correctness and QA predictions.
    """
    out: dict = {}
    absent: dict[str, str] = {}
    per_item: dict = {}
    by_role: dict[str, list[tuple[float, float]]] = {r: [] for r in SCORED_ROLES}
    sizes: dict[str, list[int]] = {r: [] for r in SCORED_ROLES}  # each scored set's items, for <role>_items
    untrained: list[tuple[float, float, float | None]] = []  # what must be kept and no retain term trains on
    heldout: list[tuple[float, float, float | None]] = []  # of which the held-out retain items
    for es in task.evals:
        r = evaluate_set(model, tokenizer, task, es, batch_size=batch_size, max_new_tokens=max_new_tokens,
                         max_len=max_len, progress=progress)
        absent.update({f"{es.name}_{k}": absent_reason(f"{es.name}_{k}", why)
                       for k, why in r.pop("_absent", {}).items()})
        per_item[es.name] = {k[1:]: r.pop(k) for k in list(r) if k.startswith("_")}
        out.update({f"{es.name}_{k}": v for k, v in r.items()})
        if es.kind in PRIMARY and es.role in by_role and not es.variant:
            by_role[es.role].append((r[PRIMARY[es.kind]], es.chance or 0.0, r.get("acc_norm")))
            sizes[es.role].append(len(es.items))
        if es.kind in PRIMARY and (es.role in HELDOUT_KEEP_ROLES and not es.variant
                                   or es.role == "retain" and es.variant):
            untrained.append((r[PRIMARY[es.kind]], es.chance or 0.0, r.get("acc_norm")))
            if es.role == "retain":
                heldout.append(untrained[-1])
    for role, vals in by_role.items():
        if vals:
            out[f"{role}_score"] = float(np.mean([v for v, _, _ in vals]))
            out[f"{role}_chance"] = float(np.mean([c for _, c, _ in vals]))
            out[f"{role}_items"] = effective_items(sizes[role])
            if any(n is not None for _, _, n in vals):  # a cloze set: the verdicts read it length-normalised
                out[f"{role}_score_norm"] = float(np.mean([v if n is None else n for v, _, n in vals]))
    for key, vals in (("heldout_keep", heldout), ("untrained_keep", untrained)):
        if vals:
            out[f"{key}_score"] = float(np.mean([v if n is None else n for v, _, n in vals]))
            out[f"{key}_chance"] = float(np.mean([c for _, c, _ in vals]))
    asked = requested_metrics(task)  # the metrics the task asks for by name, those whose data it has
    out.update(task_metrics(model, tokenizer, task, asked, batch_size=batch_size))
    absent.update({key: absent_reason(key, need.why(task)) for key, need in left_out(task, asked).items()})
    if absent:
        out["absent"] = absent
    if details:
        out["_per_item"] = per_item
    return out


def evaluate_benchmark(model, tokenizer, name: str | None = None, limit: int | None = None, *, data=None,
                       kind: str | None = None, mapping: dict | str | None = None, batch_size: int = 32,
                       max_new_tokens: int | None = None, **loader_kw) -> dict:
    """:func:`evaluate_task` (with ``details``) on the task of benchmark ``name`` or of the user file ``data``
    (:func:`obliviate.tasks.benchmark.benchmark_task`; ``loader_kw``: ``root=``, ``allow_hub=``)."""
    task = benchmark_task(name, data=data, kind=kind, mapping=mapping, limit=limit, **loader_kw)
    return evaluate_task(model, tokenizer, task, batch_size=batch_size, max_new_tokens=max_new_tokens,
                         details=True)


def item_records(task: Task, per_item: dict, tokenizer=None) -> dict[str, list[dict]]:
    """Per evaluation set of ``task`` that :func:`evaluate_task` (``details=True``) scored item by item
    (``per_item``: its ``_per_item``), one record per item, as lm-eval's ``--log_samples`` writes them:
    ``input`` (the question), ``gold``, ``prediction`` and ``score`` (1.0 right, 0.0 wrong); a QA record also
    holds the ``prompt`` the model was given (the task's format, with ``tokenizer`` for a chat template) and
    any accepted ``alternatives``; an MCQ record the ``choices`` and both indices (``gold_index``,
    ``prediction_index``)."""
    out: dict[str, list[dict]] = {}
    for es in task.evals:
        got = per_item.get(es.name)
        if not got or "correct" not in got:
            continue
        recs = []
        for k, (x, score, pred) in enumerate(zip(es.items, got["correct"], got.get("predictions") or [])):
            if es.kind == "qa":
                rec = {"input": x["question"], "prompt": qa_item_prompt(task, x, tokenizer),
                       "gold": x["answer"],
                       "prediction": pred, "score": float(score)}
                alternatives = _meta(x).get("alternatives")
                if alternatives:
                    rec["alternatives"] = list(alternatives)
            else:
                choices, gold = list(x["choices"]), x["answer_index"]
                rec = {"input": x["question"], "choices": choices, "gold": choices[gold], "gold_index": gold,
                       "prediction": choices[pred] if 0 <= pred < len(choices) else None,
                       "prediction_index": pred,
                       "score": float(score)}
            recs.append({"item": k, **rec})
        out[es.name] = recs
    return out


def keep_score(m: dict) -> float | None:
    """What unlearning must keep: the retain score, else the neighbour or utility score (None without any)."""
    for role in ("retain", "neighbour", "utility"):
        if m.get(f"{role}_score") is not None:
            return m[f"{role}_score"]
    return None


HELDOUT_KEEP_ROLES = ("neighbour", "utility")
"""Roles whose sets no retain term trains on; with the retain role's variants (held-out retain items: wordings
of the retain facts, a retain file's held-out pairs) they make ``untrained_keep_score``, the mean of their
primary scores (length-normalised where cloze); the variants alone make ``heldout_keep_score``."""


def untrained_keep(m: dict) -> tuple[float | None, float]:
    """``(score, chance)`` of what must be kept and no retain term trains on: ``untrained_keep_score``, or in
    metrics written before it had its name, ``heldout_keep_score``, which then pooled the same sets."""
    key = "untrained_keep" if m.get("untrained_keep_score") is not None else "heldout_keep"
    return m.get(f"{key}_score"), m.get(f"{key}_chance", 0.0)


def untrained_keep_source(m: dict) -> str:
    """``held-out kept knowledge (held-out retain items, utility sets)``: what ``untrained_keep_score`` read
    in ``m`` (metrics written before it had its name say no more than ``held-out kept knowledge``)."""
    parts = [("held-out retain items", "heldout_keep_score"), ("neighbour sets", "neighbour_score"),
             ("utility sets", "utility_score")]
    named = [w for w,
             key in parts if m.get(key) is not None] if m.get("untrained_keep_score") is not None else []
    return "held-out kept knowledge" + (f" ({', '.join(named)})" if named else "")


def score_against(base: dict, m: dict) -> dict:
    """S-unlearning of ``m`` relative to ``base`` (chance-corrected): ``s_unlearning = u * r`` with ``r`` read
    on what must be kept and no retain term trains on (``untrained_keep_score``: neighbours, utility, held-out
    retain items, :func:`untrained_keep`; ``r_source`` says which), and ``s_unlearning_trained = u *
    r_trained`` with ``r_trained`` on the keep score of the retain data the methods train on
    (:func:`keep_score`). Without a held-out set the two are the same and ``r_source`` says so."""
    if base.get("forget_score") is None:
        return {}
    keep_b, keep_m = keep_score(base), keep_score(m)
    role = next((r for r in ("retain", "neighbour", "utility") if base.get(f"{r}_score") is not None), None)
    if keep_b is None:
        keep_b = keep_m = 1.0
    chance = base.get("forget_chance", 0.0)
    trained = s_unlearning(base["forget_score"], m["forget_score"], keep_b, keep_m, chance=chance,
                           retain_chance=base.get(f"{role}_chance", 0.0) if role else 0.0)
    out = {"u": trained["u"], "r_trained": trained["r"], "s_unlearning_trained": trained["s"]}
    (kept_b, chance_b), (kept_m, _) = untrained_keep(base), untrained_keep(m)
    if kept_b is not None and kept_m is not None:
        held = s_unlearning(base["forget_score"], m["forget_score"], kept_b, kept_m, chance=chance,
                            retain_chance=chance_b)
        return {**out, "r": held["r"], "s_unlearning": held["s"],
                "r_source": untrained_keep_source(base)}
    return {**out, "r": trained["r"], "s_unlearning": trained["s"], "r_source": f"{role or 'no'} "
    "role (trained on)"}


def knows_forget_set(m: dict, margin: float = 0.1) -> bool | None:
    """Whether the forget score is clearly above chance (None when the task has no forget QA/MCQ set)."""
    if m.get("forget_score") is None:
        return None
    return m["forget_score"] > m.get("forget_chance", 0.0) + margin


@dataclass
class EvalOptions:
    """The ``eval`` config section of ``eval``, ``finetune`` and ``unlearn`` (``eval.batch_size=8``)."""
    batch_size: int = 32
    max_new_tokens: int | None = None
    """Greedy tokens per QA answer (default: the longest reference answer plus 4)."""

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"config key 'eval.batch_size': must be >= 1, got {self.batch_size}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"config key 'eval.max_new_tokens': must be >= 1, got {self.max_new_tokens}")


def eval_kwargs(cfg, progress: bool) -> dict:
    """The keyword arguments of :func:`obliviate.eval.suite.evaluate_task` set by ``cfg.eval``."""
    return {"batch_size": cfg.eval.batch_size, "max_new_tokens": cfg.eval.max_new_tokens,
            "progress": progress}


def task_metrics(model, tokenizer, task: Task, names: Sequence[str] | None = None, *, reference_model=None,
                 batch_size: int = 16, k: float = 0.2, p: float = GRADNORM_P,
                 add_eos: bool | None = None) -> dict:
    """The values of the registered metrics ``names`` (default:
    :func:`~obliviate.eval.metric.requested_metrics`) of ``model`` on ``task``, keyed as
    :data:`~obliviate.eval.metric.METRICS` says, in the order asked; a metric whose data the task lacks is
    left out (:func:`~obliviate.eval.metric.unavailable` says why). ``k``: the Min-K% / Min-K%++ fraction;
    ``p``: GradNorm's norm; ``reference_model``: ``mia_reference``'s (it must share ``tokenizer``);
    ``add_eos``: whether an eos is scored after each answer (default: yes, but not after a chat template's end
    of turn, as the task's training sequences)."""
    names = requested_metrics(task) if names is None else tuple(dict.fromkeys(names))
    reference = reference_model is not None
    metrics = [m for m in (METRICS.lookup(n) for n in names) if m.missing(task, reference) is None]
    run = MetricRun(model, tokenizer, task, tuple(m.name for m in metrics), batch_size=batch_size, k=k, p=p,
                    add_eos=not task.prompt.chat if add_eos is None else add_eos,
                    reference_model=reference_model)
    out: dict = {}
    for m in metrics:
        value = m.compute(run)
        if isinstance(value, dict):
            if m.key not in value:
                raise RuntimeError(f"metric {m.name!r}: its compute function returned no {m.key!r}")
            out.update(value)
        else:
            out[m.key] = value
    return out
