"""Tokenised datasets with token-level labels, and batch collation.

Documents from :mod:`obliviate.world` carry character-level label spans. Here
they are tokenised with offsets and each token takes the label of the first
non-space character it covers, so every token of the corpus knows its domain,
whether it belongs to the concept, to the toxic register, and (for answer
tokens) whether it is forget-specific or structural.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from obliviate.errors import ConfigError, DataError
from obliviate.losses import IGNORE_INDEX
from obliviate.models.tokenizer import adds_bos, bos_prefix, pad_id
from obliviate.tasks.base import Data, PromptFormat
# the QA format, imported from here by the trainers, the evaluation and the attacks
from obliviate.tasks.base import qa_answer, qa_prompt  # noqa: F401


@dataclass
class TokenDataset:
    """Variable-length token sequences with aligned per-token label arrays."""

    input_ids: list[np.ndarray]
    labels: dict[str, list[np.ndarray]] = field(default_factory=dict)
    vocab: dict[str, list[str]] = field(default_factory=dict)
    """For each label field, the names of its integer codes."""

    def __len__(self) -> int:
        return len(self.input_ids)

    def n_tokens(self) -> int:
        return int(sum(len(x) for x in self.input_ids))


def _char_labels(text: str, spans: list, fields: list[str]) -> dict[str, list]:
    """Expand spans to one label value per character (for each field)."""
    per_char = {f: [None] * len(text) for f in fields}
    for start, end, lab in spans:
        for f in fields:
            v = lab.get(f)
            col = per_char[f]
            for i in range(start, min(end, len(text))):
                col[i] = v
    return per_char


def token_labels(text: str, offsets: list[tuple[int, int]], spans: list,
                 fields: list[str]) -> dict[str, list]:
    """Label of each token = label of the first non-space char in its offset range."""
    per_char = _char_labels(text, spans, fields)
    out = {f: [] for f in fields}
    for start, end in offsets:
        i = start
        while i < end - 1 and text[i].isspace():
            i += 1
        i = min(i, len(text) - 1)
        for f in fields:
            out[f].append(per_char[f][i] if i >= 0 else None)
    return out


def encode_documents(tokenizer, documents: list[dict], max_len: int = 256,
                     fields: tuple[str, ...] = ("domain", "concept", "toxic", "answer",
                                                "split")) -> TokenDataset:
    """Tokenise labelled documents: ``[bos] + tokens + [eos]`` (bos where the tokenizer's models take one,
    :func:`~obliviate.models.tokenizer.adds_bos`), split into ``max_len`` chunks."""
    if not documents:
        raise DataError("no documents to encode")
    vocab: dict[str, dict] = {f: {} for f in fields}
    ids_out, labels_out = [], {f: [] for f in fields}
    bos, eos = (tokenizer.bos_token_id if adds_bos(tokenizer) else None), tokenizer.eos_token_id
    texts = [d["text"] for d in documents]
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    for doc, ids, offs in zip(documents, enc["input_ids"], enc["offset_mapping"]):
        labs = token_labels(doc["text"], offs, doc.get("spans", []), list(fields))
        seq = ([bos] if bos is not None else []) + list(ids) + ([eos] if eos is not None else [])
        codes = {}
        for f in fields:
            vals = ([labs[f][0] if labs[f] else None] * (bos is not None) + labs[f]
                    + [None] * (eos is not None))
            table = vocab[f]
            codes[f] = [table.setdefault(str(v), len(table)) for v in vals]
        step = max_len
        for s in range(0, len(seq), step):
            chunk = seq[s:s + step]
            if len(chunk) < 2:
                continue
            ids_out.append(np.asarray(chunk, dtype=np.int64))
            for f in fields:
                labels_out[f].append(np.asarray(codes[f][s:s + step], dtype=np.int64))
    names = {f: [k for k, _ in sorted(t.items(), key=lambda kv: kv[1])] for f, t in vocab.items()}
    return TokenDataset(ids_out, labels_out, names)


def collate(seqs: list[np.ndarray], pad_id: int, extra: dict[str, list[np.ndarray]] | None = None,
            label_mask: list[np.ndarray] | None = None) -> dict:
    """Right-pad sequences into a batch; padding gets label -100 and mask 0."""
    T = max(len(s) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    att = torch.zeros((B, T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(s)
        att[i, :len(s)] = 1
    labels = ids.masked_fill(att == 0, IGNORE_INDEX)
    if label_mask is not None:
        for i, m in enumerate(label_mask):
            keep = torch.zeros(T, dtype=torch.bool)
            keep[:len(m)] = torch.as_tensor(m, dtype=torch.bool)
            labels[i] = labels[i].masked_fill(~keep, IGNORE_INDEX)
    batch = {"input_ids": ids, "attention_mask": att, "labels": labels}
    for name, arrs in (extra or {}).items():
        t = torch.full((B, T), -1, dtype=torch.long)
        for i, a in enumerate(arrs):
            t[i, :len(a)] = torch.as_tensor(a)
        batch[name] = t
    return batch


MAX_CHARS_PER_TOKEN = 64
"""No token of a text tokenizer covers more characters than this (GPT-2's longest run about 30, Llama's
16)."""


def text_batches(tokenizer, texts: Sequence[str], batch_size: int = 16, max_len: int = 128):
    """Batches (``collate``) of ``texts`` encoded as the tokenizer encodes them (its special tokens), each cut
    to ``max_len`` tokens, padded with :func:`~obliviate.models.tokenizer.pad_id`; empty encodings are
    dropped."""
    pad = pad_id(tokenizer)
    texts = list(texts)
    for s in range(0, len(texts), batch_size):
        enc = tokenizer(texts[s:s + batch_size], truncation=True, max_length=max_len)["input_ids"]
        seqs = [np.asarray(x, dtype=np.int64) for x in enc if len(x)]
        if seqs:
            yield collate(seqs, pad)


def clip_chars(text: str, max_tokens: int | None, keep: str = "end") -> str:
    """``text`` without characters that cannot be among its last (``keep="end"``) or first (``"start"``)
    ``max_tokens`` tokens: at most ``max_tokens * MAX_CHARS_PER_TOKEN`` characters are kept. Tokenising a
    50 MB question whole took minutes and gigabytes (and ended the process) only for most of it to be cut;
    callers that cut token ids to a length clip the text first, so the tokenizer sees a bounded string."""
    if max_tokens is None or not isinstance(text, str):
        return text
    room = max(1, max_tokens) * MAX_CHARS_PER_TOKEN
    if len(text) <= room:
        return text
    return text[-room:] if keep == "end" else text[:room]


def answer_ids(tokenizer, answer: str, eos: int | None) -> list[int]:
    """The token ids of ``answer`` as training sees it after its prompt: tokenised alone, then ``eos`` (None:
    none)."""
    return tokenizer(answer, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])


def encode_prompt_answer(tokenizer, prompts: list[str], answers: list[str], max_len: int = 256,
                         add_eos: bool = True) -> tuple[list, list]:
    """Token ids of ``[bos] + prompt + answer + eos`` and a mask that is 1 on answer (and eos) tokens only.

    bos where the tokenizer's models take one and the prompt does not already start with it
    (:func:`~obliviate.models.tokenizer.bos_prefix`); no eos with ``add_eos=False`` (a chat answer ends with
    its template's end of turn instead, :meth:`~obliviate.tasks.base.PromptFormat.pairs`). The prompt is
    tokenised alone, as generation sees it, and the answer after it."""
    seqs, masks = [], []
    eos = tokenizer.eos_token_id if add_eos else None
    adds = adds_bos(tokenizer)
    for p, a in zip(prompts, answers):
        # the first max_len tokens stay
        p, a = clip_chars(p, max_len, "start"), clip_chars(a, max_len, "start")
        p_ids = bos_prefix(tokenizer, p, adds=adds) + tokenizer(p, add_special_tokens=False)["input_ids"]
        a_ids = answer_ids(tokenizer, a, eos)
        seq = (p_ids + a_ids)[:max_len]
        mask = ([0] * len(p_ids) + [1] * len(a_ids))[:max_len]
        seqs.append(np.asarray(seq, dtype=np.int64))
        masks.append(np.asarray(mask, dtype=np.int64))
    return seqs, masks


def pack_sequences(dataset: TokenDataset, row_len: int) -> TokenDataset:
    """Pack whole sequences into rows of at most ``row_len`` tokens (first fit, in order).

    Each sequence keeps its own bos/eos, so documents stay delimited; attention
    runs across documents within a row, as in ordinary LM pretraining. Packing
    removes almost all padding, which is most of the cost on a CPU.
    """
    rows: list[list[int]] = []
    fill: list[int] = []
    for i, seq in enumerate(dataset.input_ids):
        n = len(seq)
        for r, used in enumerate(fill):
            if used + n <= row_len:
                rows[r].append(i)
                fill[r] += n
                break
        else:
            rows.append([i])
            fill.append(n)
    ids = [np.concatenate([dataset.input_ids[i] for i in row]) for row in rows]
    labels = {f: [np.concatenate([arrs[i] for i in row]) for row in rows] for f,
              arrs in dataset.labels.items()}
    return TokenDataset(ids, labels, dict(dataset.vocab))


def as_data(data) -> Data:
    """A :class:`~obliviate.tasks.Data` from a Data, or from a list of formatted ``(prompt, answer)``
    pairs."""
    if isinstance(data, Data):
        return data
    return Data(qa=[(p, a) for p, a in data])


IDENTITY_PROMPT = PromptFormat(template="{question}", answer_prefix="")
"""Pairs that are already formatted prompts and answers (the world's and TOFU's own lists)."""


def encode_data(tokenizer, data, prompt: PromptFormat | None = None, max_len: int = 256,
                doc_mode: str = "chunk") -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    """Token ids and loss masks of ``data`` (a :class:`Data` or formatted pairs); returns (ids, masks, stats).

    QA pairs: ``prompt + answer + eos``, loss on the answer and eos (:func:`encode_prompt_answer`); with a
    chat format, the template's turns and its end of turn in place of eos (:meth:`PromptFormat.pairs`).
    Documents: ``bos + text + eos``, loss on every token; a document longer than ``max_len`` tokens is split
    into consecutive windows (``doc_mode="chunk"``, nothing lost) or cut to its first ``max_len`` tokens
    (``"cut"``). ``stats`` counts documents, windows and tokens cut, so a run can say what it did to long
    documents.
    """
    if doc_mode not in ("chunk", "cut"):
        raise ConfigError(f"config key 'doc_mode': must be 'chunk' or 'cut', got {doc_mode!r}")
    data = as_data(data)
    fmt = prompt or IDENTITY_PROMPT
    seqs, masks = [], []
    stats = {"qa": len(data.qa), "docs": len(data.docs), "doc_windows": 0, "tokens_cut": 0, "qa_cut": 0}
    if data.qa:
        pairs = fmt.pairs(data.qa, tokenizer)
        seqs, masks = encode_prompt_answer(tokenizer, [clip_chars(p, max_len, "start") for p, _ in pairs],
                                           [clip_chars(a, max_len, "start") for _, a in pairs],
                                           max_len=10 ** 9,
                                           add_eos=not fmt.chat)
        for i, s in enumerate(seqs):
            if len(s) > max_len:
                stats["qa_cut"] += 1
                seqs[i], masks[i] = s[:max_len], masks[i][:max_len]
    eos = tokenizer.eos_token_id
    head = bos_prefix(tokenizer) if data.docs else []
    for text in data.docs:
        ids = head + tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += [eos] if eos is not None else []
        if doc_mode == "cut" or len(ids) <= max_len:
            stats["tokens_cut"] += max(0, len(ids) - max_len)
            windows = [ids[:max_len]]
        else:
            windows = [ids[i:i + max_len] for i in range(0, len(ids), max_len)]
            windows = [w for w in windows if len(w) >= 2] or windows[:1]
        for w in windows:
            seqs.append(np.asarray(w, dtype=np.int64))
            masks.append(np.ones(len(w), dtype=np.int64))
        stats["doc_windows"] += len(windows)
    return seqs, masks, stats
