"""Logit lens: read the answer off intermediate layers, where output-side unlearning may not reach.

As Patil et al. 2023, each layer's last-token hidden state goes through the final norm and the unembedding
(:func:`lens_logits`), each forget QA item read at its answer's first distinguishing token
(:func:`distinguishing_offsets`). The reads and their counts: docs/evaluation.md, "Logit lens".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.scoring import has_forget_qa
from obliviate.data import collate, encode_prompt_answer
from obliviate.errors import DataError, ModelError
from obliviate.eval.suite import qa_item_prompt
from obliviate.losses import at_least_float32
from obliviate.models.layers import (capture_hidden, eval_mode, final_norm, gather_last, last_token_index,
                                     num_layers,
                                     output_embeddings)
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import Task


@torch.no_grad()
def lens_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(L, B, V) logits of every decoder layer's hidden state at each row's last token, through the final
    norm and the unembedding (float32)."""
    head, norm = output_embeddings(model), final_norm(model)
    if head is None:
        raise ModelError(f"a {type(model).__name__} has no unembedding (lm_head) for the logit lens")
    L = num_layers(model)
    with eval_mode(model), capture_hidden(model, range(L)) as hs:
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        last = last_token_index(attention_mask)
        h = torch.stack([gather_last(hs[l], last) for l in range(L)])  # (L, B, d)
        if norm is not None:
            h = norm(h)
        return at_least_float32(head(h))


def distinguishing_offsets(answers: Sequence[Sequence[int]]) -> list[int]:
    """Per answer (token ids), the index of its first token that parts it from every *different* answer: the
    longest prefix it shares with any other distinct answer (clamped to its last token). Equal answers share
    their offset; an answer unlike every other at its first token has offset 0."""
    keys = sorted({tuple(a) for a in answers})
    share = {}
    for i, a in enumerate(keys):  # in sorted order the longest shared prefix is with a neighbour
        best = 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(keys):
                b, n = keys[j], 0
                while n < min(len(a), len(b)) and a[n] == b[n]:
                    n += 1
                best = max(best, n)
        share[a] = min(best, len(a) - 1)
    return [share[tuple(a)] for a in answers]


def answer_targets(tokenizer, prompts: Sequence[str], answers: Sequence[str], max_len: int = 256):
    """``(seqs, targets, offsets)``: per item the token sequence ``[bos] + prompt`` followed by the answer's
    first ``o`` tokens, and the answer's token ``o``, its first distinguishing token (docs/evaluation.md,
    "Logit lens")."""
    seqs, masks = encode_prompt_answer(tokenizer, list(prompts), list(answers), max_len, add_eos=False)
    starts, spans = [], []
    for s, m in zip(seqs, masks):
        at = int(np.argmax(m)) if m.any() else 0
        if at == 0:
            raise DataError("logit lens: an answer has no token after its prompt")
        starts.append(at)
        spans.append([int(t) for t, keep in zip(s[at:], m[at:]) if keep])
    offsets = distinguishing_offsets(spans)
    return ([s[:at + o] for s, at, o in zip(seqs, starts, offsets)],
            [span[o] for span, o in zip(spans, offsets)], offsets)


def lens_hits(logits: torch.Tensor, targets: torch.Tensor, ks: Sequence[int] = (1, 10),
              delta_k: int = 10) -> dict:
    """Per item (B,) booleans from lens logits (L, B, V) and target tokens (B,): ``top<k>`` (at some layer),
    ``last_top1``, ``delta_top<delta_k>`` (among the largest layer-to-layer probability rises) and
    ``by_layer`` (L, B) top-1 hits."""
    L, B, V = logits.shape
    probs = logits.softmax(-1)
    # (L, B): tokens above t
    rank = (logits > logits.gather(2, targets[None, :, None].expand(L, B, 1))).sum(-1)
    out = {f"top{k}": (rank < k).any(0) for k in ks}
    out["last_top1"] = rank[-1] == 0
    out["by_layer"] = rank == 0
    if L > 1:
        rise = probs[1:] - probs[:-1]  # (L-1, B, V)
        top = rise.topk(min(delta_k, V), dim=-1).indices
        out[f"delta_top{delta_k}"] = (top == targets[None, :, None]).any(-1).any(0)
    else:
        out[f"delta_top{delta_k}"] = torch.zeros(B, dtype=torch.bool)
    return out


def logit_lens_attack(model, tokenizer, task: Task, *, ks: Sequence[int] = (1, 10), delta_k: int = 10,
                      max_items: int = 200, batch_size: int = 32) -> dict:
    """The logit-lens success rates on the task's forget QA items (module docstring) and
    ``logit_lens_cost``."""
    items = [x for es in task.evals_by_role("forget",
                                            variants=False) if es.kind == "qa" for x in es.items][:max_items]
    if not items:
        raise DataError(f"task {task.name!r} has no forget QA items for the logit lens")
    seqs, first, offsets = answer_targets(tokenizer, [qa_item_prompt(task, x, tokenizer) for x in items],
                                          [task.prompt.answer(x["answer"]) for x in items])
    dev = next(model.parameters()).device
    pad = pad_id(tokenizer)
    hits: dict[str, list] = {}
    cost = Cost()
    with counting(model, cost=cost):
        for i in range(0, len(seqs), batch_size):
            b = collate(seqs[i:i + batch_size], pad)
            lg = lens_logits(model, b["input_ids"].to(dev), b["attention_mask"].to(dev))
            for k, v in lens_hits(lg, torch.tensor(first[i:i + batch_size], device=lg.device), ks,
                                  delta_k).items():
                hits.setdefault(k, []).append(v.cpu())
    cat = {k: torch.cat(v, dim=-1).float() for k, v in hits.items()}
    by_layer = cat.pop("by_layer").mean(-1)
    out = {f"logit_lens_{k}": float(v.mean()) for k, v in cat.items()}
    out["logit_lens_by_layer"] = {str(l): float(a) for l, a in enumerate(by_layer)}
    out["logit_lens_best_layer"] = int(by_layer.argmax())
    out["logit_lens_offset"] = float(np.mean(offsets))
    out.update(read_counts("logit_lens", len(items)))
    out["logit_lens_cost"] = cost.as_dict()
    return out


@register_attack("logit_lens", needs="forget QA pairs (a --forget file of questions and answers)",
                 applies=has_forget_qa,
                 reads=AttackRead("forget_score", "logit_lens_top1", chance="forget_chance",
                                  label="the answer's first distinguishing token top-1 at some layer, "
                                        "against the forget score", shown=("logit_lens_last_top1",)))
def logit_lens_run(r: AttackRun, cfg: None) -> dict:
    return logit_lens_attack(r.model, r.tokenizer, r.task, max_items=r.cfg.max_eval)
