"""Optimised suffix: one universal suffix, found by greedy coordinate gradient, that draws the answers out.

Zou et al. 2023 (GCG): m suffix tokens after each forget question of half A, each iteration trying
``candidates`` one-token swaps among each position's ``topk`` most negative one-hot gradients; scored on half
B. The same machinery places a universal prefix (:mod:`obliviate.attacks.prefix`) and scores continuous
embeddings (:func:`inserted_terms`). docs/evaluation.md, "More attacks".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.errors import ConfigError, DataError
from obliviate.losses import at_least_float32
from obliviate.models.layers import eval_mode, input_embeddings
from obliviate.models.tokenizer import bos_prefix, pad_id
from obliviate.tasks.base import Task

MARK = "\x1fSUFFIX\x1f"


@dataclass
class GCGConfig:
    m: int = 8
    """Suffix length (tokens)."""
    iterations: int = 20
    topk: int = 32
    candidates: int = 64
    """Suffixes evaluated per iteration."""
    max_items: int = 32
    """At most this many questions of each half."""
    batch_size: int = 64
    """Sequences per forward pass when evaluating candidates."""
    seed: int = 0

    def __post_init__(self):
        for key in ("m", "topk", "candidates", "max_items", "batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key 'gcg_{key}': must be >= 1, got {getattr(self, key)}")
        if self.iterations < 0:
            raise ConfigError(f"config key 'gcg_iterations': must be >= 0, got {self.iterations}")


Item = tuple[list[int], list[int], list[int]]
"""(ids before the suffix, ids after it, answer ids)."""


POSITIONS = ("suffix", "prefix")


def suffix_items(task: Task, tokenizer, qa: Sequence[tuple[str, str]],
                 position: str = "suffix") -> list[Item]:
    """Each (question, answer) as token ids around the inserted tokens' place: right after the question
    (``position="suffix"``, the module docstring) or right before it (``"prefix"``: the universal prefix,
    :mod:`obliviate.attacks.prefix`, and the soft prompt), inside the task's prompt format either way."""
    if position not in POSITIONS:
        raise ConfigError(f"unknown position {position!r} of the optimised tokens (valid: "
                          f"{', '.join(POSITIONS)})")
    items = []
    for q, a in qa:
        text = MARK + q if position == "prefix" else q + MARK
        before, after = task.prompt.prompt(text, tokenizer).split(MARK, 1)
        pre = bos_prefix(tokenizer, before) + tokenizer(before, add_special_tokens=False)["input_ids"]
        post = tokenizer(after, add_special_tokens=False)["input_ids"]
        ans = tokenizer(task.prompt.answer(a), add_special_tokens=False)["input_ids"]
        if ans:
            items.append((pre, post, ans))
    return items


def _answer_terms(logits: torch.Tensor, ids: torch.Tensor, ans_pos) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: mean answer-token NLL and whether every answer token is the argmax."""
    nll, ok = [], []
    for i, (start, n) in enumerate(ans_pos):
        lg = at_least_float32(logits[i, start - 1:start - 1 + n])
        tgt = ids[i, start:start + n].to(lg.device)
        nll.append(torch.nn.functional.cross_entropy(lg, tgt))
        ok.append(bool((lg.argmax(-1) == tgt).all()))
    return torch.stack(nll), torch.tensor(ok)


@torch.no_grad()
def suffix_losses(model, items: Sequence[Item], suffixes: torch.Tensor, pad: int, batch_size: int = 64):
    """(C,) mean answer NLL over ``items`` for each suffix of ``suffixes`` (C, m), and (C, N) greedy hits."""
    dev = next(model.parameters()).device
    with eval_mode(model):
        rows = [(c, j) for c in range(len(suffixes)) for j in range(len(items))]
        nll = torch.zeros(len(suffixes), len(items))
        ok = torch.zeros(len(suffixes), len(items), dtype=torch.bool)
        for s in range(0, len(rows), batch_size):
            chunk = rows[s:s + batch_size]
            seqs = [(items[j], suffixes[c].tolist()) for c, j in chunk]
            ids, mask, pos = _batch_rows(seqs, pad)
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
            a, b = _answer_terms(out, ids, pos)
            for (c, j), x, y in zip(chunk, a.cpu(), b):
                nll[c, j], ok[c, j] = x, y
    return nll.mean(1), ok


def _batch_rows(rows, pad: int):
    """Right-padded ids and mask of ``pre + suffix + post + answer`` for (item, suffix) rows, and each row's
    (answer start, answer length)."""
    seqs = [pre + suf + post + ans for (pre, post, ans), suf in rows]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    pos = []
    for i, (s, ((pre, post, ans), suf)) in enumerate(zip(seqs, rows)):
        ids[i, :len(s)] = torch.as_tensor(s)
        mask[i, :len(s)] = 1
        pos.append((len(pre) + len(suf) + len(post), len(ans)))
    return ids, mask, pos


def inserted_terms(model, items: Sequence[Item], inserted: torch.Tensor,
                   pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per item: mean answer-token NLL (gradients flow to ``inserted``) and whether every answer token is the
    argmax, with the (m, d) embeddings ``inserted`` at the inserted tokens' place of every item."""
    emb = input_embeddings(model)
    dev = emb.weight.device
    m = inserted.shape[0]
    ids, mask, pos = _batch_rows([(it, [pad] * m) for it in items], pad)
    ids, mask = ids.to(dev), mask.to(dev)
    e = emb(ids).detach()  # (B, T, d)
    starts = torch.tensor([len(pre) for pre, _, _ in items], device=dev)
    cols = starts[:, None] + torch.arange(m, device=dev)  # (B, m)
    rows = torch.arange(len(items), device=dev)[:, None].expand_as(cols)
    e = e.index_put((rows, cols), inserted.to(e.dtype).expand(len(items), -1, -1))
    return _answer_terms(model(inputs_embeds=e, attention_mask=mask).logits, ids, pos)


def suffix_gradient(model, items: Sequence[Item], suffix: torch.Tensor,
                    pad: int) -> tuple[torch.Tensor, float]:
    """d loss / d one-hot(suffix), (m, V), and the loss, with the suffix fed as embeddings."""
    W = input_embeddings(model).weight  # (V, d)
    one_hot = torch.zeros(len(suffix), W.shape[0], device=W.device, dtype=W.dtype)
    one_hot[torch.arange(len(suffix)), suffix.to(W.device)] = 1.0
    one_hot.requires_grad_(True)
    with eval_mode(model):
        loss = inserted_terms(model, items, one_hot @ W, pad)[0].mean()
        loss.backward()
    return one_hot.grad.detach(), float(loss.detach())


def coordinate_candidates(grad: torch.Tensor, suffix: torch.Tensor, topk: int, n: int, gen: torch.Generator,
                          allowed: torch.Tensor | None = None) -> torch.Tensor:
    """(C, m) suffixes, each ``suffix`` with one position set to one of that position's ``topk`` tokens of
    most negative gradient: every such pair when ``m x topk <= n``, else ``n`` drawn at random."""
    g = grad.detach().float().cpu().clone()
    if allowed is not None:
        g[:, ~allowed.cpu()] = float("inf")
    m, V = g.shape
    k = min(topk, V if allowed is None else int(allowed.sum()))
    top = (-g).topk(k, dim=1).indices  # (m, k)
    if m * k <= n:
        pos = torch.arange(m).repeat_interleave(k)
        tok = top.reshape(-1)
    else:
        pos = torch.randint(m, (n,), generator=gen)
        tok = top[pos, torch.randint(k, (n,), generator=gen)]
    cand = suffix.cpu().repeat(len(pos), 1)
    cand[torch.arange(len(pos)), pos] = tok
    return cand


def gcg_step(model, items: Sequence[Item], suffix: torch.Tensor, loss: float | None, cfg: GCGConfig,
             gen: torch.Generator, pad: int,
             allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
    """One GCG iteration: the best candidate suffix and its loss, or ``suffix`` and ``loss`` if none is
    lower."""
    grad, cur = suffix_gradient(model, items, suffix, pad)
    loss = cur if loss is None else loss
    cand = coordinate_candidates(grad, suffix, cfg.topk, cfg.candidates, gen, allowed)
    losses, _ = suffix_losses(model, items, cand, pad, cfg.batch_size)
    best = int(losses.argmin())
    if float(losses[best]) < loss:
        return cand[best], float(losses[best])
    return suffix, loss


def allowed_tokens(model, tokenizer) -> torch.Tensor:
    """(V,) the ids the suffix may use: the tokenizer's, less its special tokens."""
    V = input_embeddings(model).weight.shape[0]
    ok = torch.zeros(V, dtype=torch.bool)
    ok[:min(V, len(tokenizer))] = True
    for i in tokenizer.all_special_ids:
        if i < V:
            ok[i] = False
    return ok


def gcg_attack(model, tokenizer, task: Task, cfg: GCGConfig | None = None, *, position: str = "suffix",
               key: str = "gcg") -> dict:
    """Optimise a suffix (or, ``position="prefix"``, a prefix) on forget half A, score it on half B (module
    docstring), the keys named ``<key>_*``; ``model`` is untouched."""
    cfg = cfg or GCGConfig()
    halves = task.forget_halves(cfg.seed)
    if halves is None or not all(halves):
        raise DataError(f"task {task.name!r}: the optimised-{position} "
                        "attack needs at least 2 forget QA facts")
    train = suffix_items(task, tokenizer, list(halves[0])[:cfg.max_items], position)
    test = suffix_items(task, tokenizer, list(halves[1])[:cfg.max_items], position)
    pad = pad_id(tokenizer)
    allowed = allowed_tokens(model, tokenizer)
    bang = tokenizer("!", add_special_tokens=False)["input_ids"]
    start = bang[0] if bang and allowed[bang[0]] else int(allowed.nonzero()[0])
    suffix = torch.full((cfg.m,), start, dtype=torch.long)
    gen = torch.Generator().manual_seed(cfg.seed)
    requires = {n: p.requires_grad for n, p in model.named_parameters()}
    cost = Cost()
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        with counting(model, cost=cost):
            loss0, _ = suffix_losses(model, train, suffix[None], pad, cfg.batch_size)
            loss = float(loss0[0])
            for _ in range(cfg.iterations):
                suffix, loss = gcg_step(model, train, suffix, loss, cfg, gen, pad, allowed)
            _, hit0 = suffix_losses(model, test, suffix[:0][None], pad, cfg.batch_size)
            _, hit = suffix_losses(model, test, suffix[None], pad, cfg.batch_size)
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(requires[n])
            p.grad = None
    return {f"{key}_acc": float(hit.float().mean()), f"{key}_start_acc": float(hit0.float().mean()),
            f"{key}_train_loss_start": float(loss0[0]), f"{key}_train_loss": loss,
            f"{key}_{position}": tokenizer.decode(suffix), f"{key}_{position}_ids": suffix.tolist(),
            **read_counts(key, len(test)),
            f"{key}_budget": {**asdict(cfg), "evaluations": cfg.iterations * cfg.candidates},
            f"{key}_cost": cost.as_dict()}


@register_attack("gcg", needs="at least 2 forget QA pairs to split in halves",
                 applies=lambda task: task.forget_halves() is not None, config=GCGConfig,
                 reads=AttackRead("gcg_start_acc", "gcg_acc",
                                  label="an optimised suffix, held-out half scored"))
def gcg_run(r: AttackRun, cfg: GCGConfig) -> dict:
    return gcg_attack(r.model, r.tokenizer, r.task, cfg)
