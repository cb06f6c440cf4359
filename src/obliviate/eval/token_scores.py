"""Token-score quality: AUROC of per-token scores against forget-specific token labels.

Labels come from the world's forget answers (specific vs structural spans); scores are ``(B, T-1)``,
aligned with :func:`obliviate.losses.token_nll`; baselines uniform, probability and rarity. See
docs/evaluation.md, section "Metrics".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from obliviate.data import collate, qa_prompt, token_labels
from obliviate.errors import DataError
from obliviate.losses import token_nll
from obliviate.models.layers import evaluating
from obliviate.models.tokenizer import adds_bos, pad_id

LABEL_CODES = {"specific": 1, "structural": 0}


def token_auroc(scores, labels) -> float:
    """AUROC of ``scores`` for ``labels`` (1 positive, 0 negative; other values are ignored).

    Ties count one half (Mann-Whitney U), so constant scores give exactly 0.5.
    Accepts tensors or arrays of any matching shape.
    """
    from sklearn.metrics import roc_auc_score

    s = np.asarray(torch.as_tensor(scores).detach().cpu().float()).ravel()
    y = np.asarray(torch.as_tensor(labels).detach().cpu()).ravel()
    if s.shape != y.shape:
        raise DataError(f"token_auroc: {s.size} scores but {y.size} labels")
    keep = (y == 0) | (y == 1)
    s, y = s[keep], y[keep]
    if not (y == 1).any() or not (y == 0).any():
        raise DataError(f"token_auroc needs both classes; got {int((y == 1).sum())} positive and "
                        f"{int((y == 0).sum())} negative tokens")
    return float(roc_auc_score(y, s))


def world_token_labels(tokenizer, facts: Sequence[dict], max_len: int = 256) -> tuple[dict, torch.Tensor]:
    """A batch of the facts' QA sequences and their token labels (B, T-1).

    The batch has ``input_ids``, ``attention_mask`` and ``labels`` (answer and eos
    tokens, -100 elsewhere), like a forget batch; the returned labels are 1/0/-1 in
    the token_nll layout (see the module docstring).
    """
    if not facts:
        raise DataError("world_token_labels: no facts")
    bos, eos = (tokenizer.bos_token_id if adds_bos(tokenizer) else None), tokenizer.eos_token_id
    seqs, answer_masks, codes = [], [], []
    for fact in facts:
        prompt = qa_prompt(fact["question"])
        text = prompt + " " + fact["answer"]
        start = len(prompt) + 1
        spans = [[start + s, start + e, {"answer": kind}] for s, e, kind in fact["answer_spans"]]
        if not spans:
            raise DataError(f"fact {fact.get('id', fact['question'])!r} has no answer_spans")
        spans[0][0] = start - 1  # the space before the answer joins the first span
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        labs = token_labels(text, enc["offset_mapping"], spans, ["answer"])["answer"]
        code = [LABEL_CODES.get(v, -1) for v in labs]
        is_answer = [1 if v in LABEL_CODES else 0 for v in labs]
        ids = ([bos] if bos is not None else []) + list(enc["input_ids"]) + ([eos] if eos is not None else [])
        pad_front, pad_back = [0] * (bos is not None), [0] * (eos is not None)
        amask = pad_front + is_answer + [1] * (eos is not None)
        code = [-1] * len(pad_front) + code + [-1] * len(pad_back)
        seqs.append(np.asarray(ids[:max_len], dtype=np.int64))
        answer_masks.append(np.asarray(amask[:max_len], dtype=np.int64))
        codes.append(np.asarray(code[:max_len], dtype=np.int64))
    pad = pad_id(tokenizer)
    batch = collate(seqs, pad, extra={"answer_role": codes}, label_mask=answer_masks)
    labels = batch.pop("answer_role")[:, 1:]  # (B, T-1): padding got -1 from collate
    return batch, labels


# ---------------------------------------------------------------- baselines

def uniform_scores(model, batch: dict) -> torch.Tensor:
    """Every position scores 1."""
    B, T = batch["input_ids"].shape
    return torch.ones(B, T - 1)


@torch.no_grad()
def probability_scores(model, batch: dict) -> torch.Tensor:
    """1 - p(y_t | y_<t, x) under ``model``."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    nll, _ = token_nll(logits, batch["input_ids"])
    return 1.0 - torch.exp(-nll)


def token_counts(tokenizer, texts: Sequence[str]) -> torch.Tensor:
    """Occurrences of each token id in ``texts`` (no special tokens added): (V,)."""
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        np.add.at(counts, np.asarray(ids, dtype=np.int64), 1)
    return torch.from_numpy(counts)


def rarity_scorer(counts: torch.Tensor) -> Callable:
    """A scorer ``(model, batch) -> 1 / (1 + count(y_t))``: rare target tokens score high."""

    def score(model, batch: dict) -> torch.Tensor:
        targets = batch["input_ids"][:, 1:].cpu()
        return 1.0 / (1.0 + counts[targets].float())

    return score


# ---------------------------------------------------------------- report

@torch.no_grad()
@evaluating
def token_score_aurocs(model, tokenizer, facts: Sequence[dict], scorers: dict[str, Callable] | None = None,
                       corpus_texts: Sequence[str] | None = None, batch_size: int = 32) -> dict:
    """Token AUROC of each scorer on ``facts`` (e.g. ``world.facts_by_split("forget")``).

    ``scorers`` maps a name to ``fn(model, batch) -> (B, T-1)`` scores, e.g.
    ``{"atwu": method.token_scores}``. The uniform and probability baselines are always
    added; the rarity baseline when ``corpus_texts`` is given. Returns
    ``{name: auroc, ..., "n_specific": int, "n_structural": int}``.
    """
    all_scorers = {"uniform": uniform_scores, "probability": probability_scores}
    if corpus_texts is not None:
        all_scorers["rarity"] = rarity_scorer(token_counts(tokenizer, corpus_texts))
    all_scorers.update(scorers or {})
    batch, labels = world_token_labels(tokenizer, facts)
    device = next(model.parameters()).device
    collected: dict[str, list[torch.Tensor]] = {n: [] for n in all_scorers}
    for s in range(0, len(facts), batch_size):
        sub = {k: v[s:s + batch_size] for k, v in batch.items()}
        T = int(sub["attention_mask"].sum(-1).max())
        sub = {k: v[:, :T].to(device) for k, v in sub.items()}
        for name, fn in all_scorers.items():
            collected[name].append(fn(model, sub).float().cpu().reshape(-1, T - 1))
    out = {}
    for name, parts in collected.items():
        chunks = [labels[s:s + batch_size, :p.size(1)] for s,
                  p in zip(range(0, len(facts), batch_size), parts)]
        out[name] = token_auroc(torch.cat([p.ravel() for p in parts]), torch.cat([c.ravel() for c in chunks]))
    out["n_specific"] = int((labels == 1).sum())
    out["n_structural"] = int((labels == 0).sum())
    return out
