"""AltPO's data step: alternate answers to the forget questions, sampled from the model itself, on disk.

For each forget QA pair the model (before unlearning) answers its own prompt by seeded sampling at
``temperature``; the first of ``tries`` samples that is not the forget answer (compared lower-cased, without
surrounding space and final punctuation) is the alternate, else the last sample. The answers are cached under
``$OBLIVIATE_CACHE/alternates/`` by a SHA-256 of the model's weights, the tokenizer's vocabulary, the prompts,
the forget answers and the settings, so a second run (a resumed one, another method setting) reads them back
instead of generating (Mekala et al. 2024 generate them once, as a dataset, before unlearning).
"""

from __future__ import annotations

import hashlib
import json

import torch

from obliviate.losses import at_least_float32
from obliviate.models.layers import evaluating
from obliviate.models.tokenizer import bos_prefix
from obliviate.utils import atomic_write_text, cache_dir


def _norm(text: str) -> str:
    return text.strip().strip(".!?").strip().lower()


def _digest(model, tokenizer, prompts: list[str], answers: list[str], settings: dict) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode() + p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps([sorted(tokenizer.get_vocab().items()), prompts, answers, settings]).encode())
    return h.hexdigest()


@torch.no_grad()
@evaluating
def sample_answer(model, tokenizer, prompt: str, generator: torch.Generator, temperature: float,
                  max_new_tokens: int) -> str:
    """One answer to ``prompt`` sampled token by token from softmax(logits / temperature), cut at eos or a
    newline."""
    dev = next(model.parameters()).device
    ids = bos_prefix(tokenizer, prompt) + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    new: list[int] = []
    for _ in range(max_new_tokens):
        x = torch.tensor([ids + new], device=dev)
        logits = at_least_float32(model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, -1]).cpu()
        nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator))
        if nxt == tokenizer.eos_token_id:
            break
        new.append(nxt)
        if "\n" in tokenizer.decode(new[-1:]):
            break
    return tokenizer.decode(new, skip_special_tokens=True).split("\n")[0].strip()


def alternate_answers(model, tokenizer, prompts: list[str], answers: list[str], *, seed: int = 0,
                      temperature: float = 1.0, tries: int = 5, max_new_tokens: int = 32, cache: bool = True
                      ) -> list[str]:
    """An alternate answer for each ``prompts[i]`` (the text the answer follows) unlike ``answers[i]``, by
    seeded sampling from ``model`` (see the module docstring), read from the cache where it was made
    before."""
    settings = {"seed": seed, "temperature": temperature, "tries": tries, "max_new_tokens": max_new_tokens}
    path = cache_dir() / "alternates" / f"{_digest(model, tokenizer, prompts, answers, settings)}.json"
    if cache and path.is_file():
        return json.loads(path.read_text())["alternates"]
    g = torch.Generator().manual_seed(seed)
    out = []
    for prompt, answer in zip(prompts, answers):
        alt = ""
        for _ in range(tries):
            alt = sample_answer(model, tokenizer, prompt, g, temperature, max_new_tokens)
            if alt and _norm(alt) != _norm(answer):
                break
        out.append(alt or "I don't know.")
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"alternates": out, "settings": settings}))
    return out
