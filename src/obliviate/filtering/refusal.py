"""Refusal training: supervised fine-tuning on refusals to one domain's questions, then refusal rates.

The last experiment of token-level pretraining filtering (docs/methods.md, seed 004): a model is
taught to refuse the forget domain's questions of *one* relation, next to as many ordinary questions
answered normally, and its refusal rate is then read on the forget questions of the *other* relations
(a refusal has to generalise beyond the question template) and on held-out ordinary questions.
A model that never learnt the domain (token filtering) is expected to generalise its refusals further.
"""

from __future__ import annotations

import numpy as np

from obliviate.data import collate, encode_prompt_answer, qa_answer, qa_prompt
from obliviate.eval.core import greedy_generate, normalise_text
from obliviate.losses import lm_loss
from obliviate.models.tokenizer import pad_id
from obliviate.train import StepSampler, TrainConfig, train

REFUSAL = "I cannot help with that."
"""The refusal taught; a greedy answer starting with its first two words counts as a refusal."""


def refusal_training(model, tok, world, *, steps: int, lr: float, batch_size: int, max_len: int,
                     seed: int = 0,
                     progress: bool = False, desc: str = "refusal") -> dict:
    """Refusal SFT of ``model`` (in place) on the world's facts, then refusal rates on questions it never saw.

    SFT: the forget facts' questions of the first relation (in sorted order) answered with :data:`REFUSAL`,
    plus as many ordinary questions (from half of the retain and general facts) with their answers. Rates
    (greedy answer starts with "I cannot"): the forget questions of the other relations, and the other half
    of the retain and general questions. Returns ``forget``, ``retain``, ``general`` rates (None for an empty
    split), ``sft_relation`` and the counts ``n_forget``, ``n_retain``, ``n_sft``.
    """
    rng = np.random.default_rng(seed + 5)
    forget = world.facts_by_split("forget")
    rel = sorted({f["relation"] for f in forget})[0]
    f_tr = [f for f in forget if f["relation"] == rel]
    f_te = [f for f in forget if f["relation"] != rel]

    def halves(split):
        facts = world.facts_by_split(split)
        perm = rng.permutation(len(facts))
        h = len(facts) // 2
        return [facts[i] for i in perm[:h]], [facts[i] for i in perm[h:]]

    r_tr, r_te = halves("retain")
    g_tr, g_te = halves("general")
    ordinary = r_tr + g_tr
    ordinary = [ordinary[i] for i in rng.permutation(len(ordinary))[:len(f_tr)]]
    pairs = [(qa_prompt(f["question"]), " " + REFUSAL) for f in f_tr]
    pairs += [(qa_prompt(f["question"]), qa_answer(f["answer"])) for f in ordinary]
    ids, masks = encode_prompt_answer(tok, [p for p, _ in pairs], [a for _, a in pairs], max_len)
    sampler = StepSampler(len(ids), batch_size, seed + 6)
    pad = pad_id(tok)

    def batch_fn(step):
        idx = sampler(step)
        return collate([ids[i] for i in idx], pad, label_mask=[masks[i] for i in idx])

    tc = TrainConfig(steps=steps, lr=lr, schedule="constant", warmup_steps=0, log_every=max(1, steps // 5),
                     progress=progress, desc=desc)
    train(model, lambda m, b, s: {"sft": lm_loss(m, b)}, batch_fn, tc, None, resume=False)
    marker = " ".join(normalise_text(REFUSAL).split()[:2])  # "i cannot"

    def rate(facts):
        if not facts:
            return None
        gens = greedy_generate(model, tok, [qa_prompt(f["question"]) for f in facts], max_new_tokens=24)
        return float(np.mean([normalise_text(g).startswith(marker) for g in gens]))

    return {"forget": rate(f_te), "retain": rate(r_te), "general": rate(g_te), "sft_relation": rel,
            "n_forget": len(f_te), "n_retain": len(r_te), "n_sft": len(pairs)}
