"""The paired forget/retain batches a method trains on: :class:`PairedData`, encoded once, drawn by step."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from obliviate.data import IDENTITY_PROMPT, as_data, collate, encode_data, encode_prompt_answer
from obliviate.errors import ConfigError, DataError
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import PromptFormat
from obliviate.train import StepSampler


class PairedData:
    """Forget/retain (and refusal) examples, paired into batches by step.

    ``forget`` / ``retain``: a :class:`~obliviate.tasks.Data` (QA pairs and/or documents,
    rendered with ``prompt``) or a list of already formatted ``(prompt, answer)`` pairs.
    ``idk``: refusal answers, paired with the forget QA prompts (IdkDPO-style methods);
    they need forget QA pairs.
    """

    def __init__(self, tokenizer, forget, retain, batch_size: int, seed: int, idk: list[str] | None = None,
                 max_len: int = 256, prompt: PromptFormat | None = None, doc_mode: str = "chunk"):
        forget, retain = as_data(forget), as_data(retain)
        if not forget:
            raise DataError("the forget set is empty: nothing to unlearn")
        if not retain:
            raise DataError("the retain set is empty")
        self.pad = pad_id(tokenizer)
        self.f_ids, self.f_mask, f_stats = encode_data(tokenizer, forget, prompt, max_len, doc_mode)
        self.r_ids, self.r_mask, r_stats = encode_data(tokenizer, retain, prompt, max_len, doc_mode)
        self.stats = {"forget": f_stats, "retain": r_stats, "max_len": max_len, "doc_mode": doc_mode}
        for side, d, masks in (("forget", forget, self.f_mask), ("retain", retain, self.r_mask)):
            # trained tokens: a label is predicted from the one before
            left = [int(m[1:].sum()) for m in masks]
            self.stats[side]["qa_no_answer"] = sum(n == 0 for n in left[:len(d.qa)])  # QA pairs come first
            if not any(left):
                raise ConfigError(f"config key 'max_len' ({max_len}) leaves no {side} token to train on: all "
                                  f"{len(masks)} {side} sequences are cut before their answer; raise max_len")
        self.f_sampler = StepSampler(len(self.f_ids), batch_size, seed)
        self.r_sampler = StepSampler(len(self.r_ids), batch_size, seed + 1)
        self.i_ids = None
        if idk:
            if forget.docs:
                raise DataError(f"refusal (IdK) answers need forget QA pairs, but the forget data has "
                                f"{len(forget.docs)} documents")
            fmt = prompt or IDENTITY_PROMPT
            prompts = [p for p, _ in fmt.pairs(forget.qa, tokenizer)]
            answers = [fmt.answer(idk[i % len(idk)]) if prompt is not None else " " + idk[i % len(idk)]
                       for i in range(len(prompts))]
            self.i_ids, self.i_mask = encode_prompt_answer(tokenizer, prompts, answers, max_len)

    def fingerprint(self) -> str:
        """A SHA-256 of every encoded sequence and label mask (forget, retain, refusals): what a resumed run
        must have trained on (:func:`resume_on_same_data`)."""
        h = hashlib.sha256()
        for group in (self.f_ids, self.f_mask, self.r_ids, self.r_mask, self.i_ids or [],
                      getattr(self, "i_mask", None) or []):
            h.update(len(group).to_bytes(8, "little"))
            for seq in group:
                a = np.ascontiguousarray(np.asarray(seq, dtype=np.int64))
                h.update(len(a).to_bytes(8, "little") + a.tobytes())
        return h.hexdigest()

    def sequences(self, key: str) -> tuple[list, list]:
        """The encoded sequences and label masks of sub-set ``key``: "forget", "retain" or "idk"."""
        got = {"forget": (self.f_ids, self.f_mask), "retain": (self.r_ids, self.r_mask),
               "idk": (self.i_ids, getattr(self, "i_mask", None))}[key]
        if got[0] is None:
            raise DataError(f"no {key} sequences in this data")
        return got

    def __call__(self, step: int) -> dict:
        """The step's batch: sub-batches "forget", "retain" (and "idk"), each with ``index``, the rows'
        example numbers (what a cached reference is read by)."""
        fi, ri = self.f_sampler(step), self.r_sampler(step)
        batch = {
            "forget": {**collate([self.f_ids[i] for i in fi], self.pad,
                                 label_mask=[self.f_mask[i] for i in fi]),
                       "index": torch.as_tensor(np.asarray(fi, dtype=np.int64))},
            "retain": {**collate([self.r_ids[i] for i in ri], self.pad,
                                 label_mask=[self.r_mask[i] for i in ri]),
                       "index": torch.as_tensor(np.asarray(ri, dtype=np.int64))},
        }
        if self.i_ids is not None:
            batch["idk"] = {**collate([self.i_ids[i] for i in fi], self.pad,
                                      label_mask=[self.i_mask[i] for i in fi]),
                            "index": torch.as_tensor(np.asarray(fi, dtype=np.int64))}
        return batch
