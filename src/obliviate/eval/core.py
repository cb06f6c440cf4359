"""Metrics as functions.

All model evaluations run under ``torch.no_grad`` in eval mode, in batches, and
accept any Hugging Face causal LM with its tokenizer (in memory).
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np
import torch

from obliviate.losses import token_nll

LETTERS = "ABCDEFGHIJ"


# ------------------------------------------------------------------ text metrics

def normalise_text(s: str) -> str:
    """Lower-case, drop punctuation, collapse whitespace (for exact match)."""
    s = s.lower()
    s = re.sub(r"[^\w\s]", " ", s)
    return " ".join(s.split())


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l_recall(prediction: str, reference: str) -> float:
    """ROUGE-L recall: LCS(pred, ref) / len(ref), on normalised word tokens."""
    ref = normalise_text(reference).split()
    if not ref:
        return 0.0
    return _lcs(normalise_text(prediction).split(), ref) / len(ref)


def chance_corrected(acc: float, base: float, chance: float) -> float:
    """clip((acc - chance) / (base - chance), 0, 1): 1 = as good as base, 0 = chance."""
    denom = base - chance
    if denom <= 0:
        return 0.0
    return float(min(1.0, max(0.0, (acc - chance) / denom)))


def s_unlearning(forget_base: float, forget_after: float, retain_base: float, retain_after: float,
                 chance: float = 0.0, retain_chance: float | None = None) -> dict:
    """S-unlearning (METHODS.md §2): S = U * R.

    U = clip((A0 - Au) / (A0 - chance), 0, 1) on the forget evaluation;
    R = clip((Mu - chance) / (M0 - chance), 0, 1) on the retain evaluation.
    """
    rc = chance if retain_chance is None else retain_chance
    denom_u = forget_base - chance
    u = 0.0 if denom_u <= 0 else float(min(1.0, max(0.0, (forget_base - forget_after) / denom_u)))
    r = chance_corrected(retain_after, retain_base, rc)
    return {"u": u, "r": r, "s": u * r}


# ------------------------------------------------------------------ model helpers

def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def _cache_kwarg(model) -> str:
    """Name of the KV-cache argument and output: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    import inspect

    from obliviate.models.layers import unwrap

    return "cache" if "cache" in inspect.signature(unwrap(model).forward).parameters else "past_key_values"


def greedy_generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 24, batch_size: int = 64,
                    stop: str | None = "\n") -> list[str]:
    """Greedy continuations of ``prompts`` (bos prepended), cut at ``stop``."""
    was_training = model.training
    model.eval()
    dev = _device(model)
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    if pad is None:
        pad = eos
    outs: list[str] = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        enc = [([bos] if bos is not None else []) + tokenizer(p, add_special_tokens=False)["input_ids"] for p in chunk]
        T = max(len(e) for e in enc)
        ids = torch.full((len(enc), T), pad, dtype=torch.long)
        att = torch.zeros((len(enc), T), dtype=torch.long)
        for j, e in enumerate(enc):  # left padding
            ids[j, T - len(e):] = torch.as_tensor(e)
            att[j, T - len(e):] = 1
        ids, att = ids.to(dev), att.to(dev)
        done = torch.zeros(len(enc), dtype=torch.bool, device=dev)
        gen = []
        past = None
        cache_kw = _cache_kwarg(model)
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        cur_ids, cur_pos = ids, pos
        for _ in range(max_new_tokens):
            out = model(input_ids=cur_ids, attention_mask=att, position_ids=cur_pos, use_cache=True, **{cache_kw: past})
            past = getattr(out, cache_kw, None)
            nxt = out.logits[:, -1].argmax(-1)
            if eos is not None:
                nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
                done |= nxt == eos
            gen.append(nxt)
            att = torch.cat([att, torch.ones_like(att[:, :1])], dim=1)
            cur_pos = cur_pos[:, -1:] + 1
            cur_ids = nxt[:, None]
            if bool(done.all()):
                break
        gen_ids = torch.stack(gen, 1).tolist() if gen else [[] for _ in enc]
        for row in gen_ids:
            if eos is not None and eos in row:
                row = row[:row.index(eos)]
            text = tokenizer.decode(row, skip_special_tokens=True)
            if stop:
                text = text.split(stop)[0]
            outs.append(text)
    model.train(was_training)
    return outs


def qa_accuracy(model, tokenizer, questions: list[str], answers: list[str], prompt_fn=None,
                max_new_tokens: int = 24, batch_size: int = 64) -> dict:
    """Greedy exact match (normalised) and mean ROUGE-L recall of answers."""
    from obliviate.data import qa_prompt

    prompt_fn = prompt_fn or qa_prompt
    if not questions:
        return {"exact_match": float("nan"), "rouge_l": float("nan"), "n": 0, "predictions": []}
    preds = greedy_generate(model, tokenizer, [prompt_fn(q) for q in questions], max_new_tokens, batch_size)
    em = [float(normalise_text(p) == normalise_text(a)) for p, a in zip(preds, answers)]
    rl = [rouge_l_recall(p, a) for p, a in zip(preds, answers)]
    return {"exact_match": float(np.mean(em)), "rouge_l": float(np.mean(rl)), "n": len(questions),
            "predictions": preds, "correct": em}


@torch.no_grad()
def choice_logprobs(model, tokenizer, contexts: list[str], continuations: list[list[str]], batch_size: int = 64,
                    normalise: bool = False) -> list[list[float]]:
    """Sum (or mean, if ``normalise``) log p(continuation | context) for each option.

    Context and continuation are tokenised separately and concatenated, the
    way lm-evaluation-harness scores ``loglikelihood`` requests.
    """
    from obliviate.data import collate

    was_training = model.training
    model.eval()
    dev = _device(model)
    bos = tokenizer.bos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    flat_seqs, flat_masks, owner = [], [], []
    for i, (ctx, conts) in enumerate(zip(contexts, continuations)):
        c_ids = ([bos] if bos is not None else []) + tokenizer(ctx, add_special_tokens=False)["input_ids"]
        for cont in conts:
            x_ids = tokenizer(cont, add_special_tokens=False)["input_ids"]
            flat_seqs.append(np.asarray(c_ids + x_ids))
            flat_masks.append(np.asarray([0] * len(c_ids) + [1] * len(x_ids)))
            owner.append(i)
    scores: list[float] = []
    for s in range(0, len(flat_seqs), batch_size):
        batch = collate(flat_seqs[s:s + batch_size], pad, label_mask=flat_masks[s:s + batch_size])
        batch = {k: v.to(dev) for k, v in batch.items()}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        nll, mask = token_nll(logits, batch["labels"])
        tot = -nll.sum(-1)
        if normalise:
            tot = tot / mask.sum(-1).clamp(min=1)
        scores.extend(tot.float().cpu().tolist())
    model.train(was_training)
    out: list[list[float]] = [[] for _ in contexts]
    for i, sc in zip(owner, scores):
        out[i].append(sc)
    return out


def mcq_prompt(question: str, choices: list[str]) -> str:
    """lm-evaluation-harness MMLU-style prompt (METHODS.md §6)."""
    lines = [question.strip()] + [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + "\nAnswer:"


def mcq_accuracy(model, tokenizer, mcqs: list[dict], style: str = "letters", batch_size: int = 64,
                 context_fn=None) -> dict:
    """Zero-shot MCQ accuracy by log-likelihood.

    ``style="letters"``: the lm-eval format, scoring " A".." D" after
    :func:`mcq_prompt`. ``style="cloze"``: score each choice text as the
    continuation of ``context_fn(question)`` (default: the question itself).
    Each MCQ is a dict with ``question``, ``choices`` and ``answer_index``.
    """
    if not mcqs:
        return {"accuracy": float("nan"), "n": 0, "predictions": []}
    if style == "letters":
        ctxs = [mcq_prompt(m["question"], m["choices"]) for m in mcqs]
        conts = [[f" {LETTERS[i]}" for i in range(len(m["choices"]))] for m in mcqs]
    elif style == "cloze":
        fn = context_fn or (lambda m: m["question"])
        ctxs = [fn(m) for m in mcqs]
        conts = [[" " + c for c in m["choices"]] for m in mcqs]
    else:
        raise ValueError(f"unknown MCQ style {style!r}")
    scores = choice_logprobs(model, tokenizer, ctxs, conts, batch_size)
    preds = [int(np.argmax(s)) for s in scores]
    correct = [float(p == m["answer_index"]) for p, m in zip(preds, mcqs)]
    return {"accuracy": float(np.mean(correct)), "n": len(mcqs), "predictions": preds, "correct": correct,
            "scores": scores}


@torch.no_grad()
def token_loss_by_label(model, dataset, field: str = "domain", batch_size: int = 32) -> dict:
    """Mean next-token loss and perplexity per label value of ``field``.

    Each target token is attributed to its own label (the token being predicted).
    """
    from obliviate.data import collate

    was_training = model.training
    model.eval()
    dev = _device(model)
    names = dataset.vocab[field]
    sums = np.zeros(len(names))
    counts = np.zeros(len(names))
    pad = 0
    for s in range(0, len(dataset), batch_size):
        seqs = dataset.input_ids[s:s + batch_size]
        labs = dataset.labels[field][s:s + batch_size]
        batch = collate(seqs, pad, extra={"lab": labs})
        ids, att = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
        logits = model(input_ids=ids, attention_mask=att).logits
        nll, mask = token_nll(logits, batch["labels"].to(dev))
        lab = batch["lab"][:, 1:].to(dev)
        for k in range(len(names)):
            sel = mask & (lab == k)
            sums[k] += float(nll[sel].sum())
            counts[k] += float(sel.sum())
    model.train(was_training)
    out = {}
    for k, name in enumerate(names):
        if counts[k] > 0:
            loss = sums[k] / counts[k]
            out[name] = {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": int(counts[k])}
    return out
