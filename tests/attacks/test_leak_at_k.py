"""leak@k against a model whose answer probability is known."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from obliviate.attacks.leak_at_k import LeakConfig, leak_at_k, leak_attack, leak_counts
from obliviate.errors import ConfigError
from obliviate.tasks.world import task_from_world


class FixedNext(nn.Module):
    """After any token but ``a`` or ``b``: ``a`` with probability ``p``, else ``b``; after them: eos."""

    def __init__(self, vocab: int, a: int, b: int, eos: int, p: float):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(max_position_embeddings=128)
        self.vocab, self.a, self.b, self.eos, self.p = vocab, a, b, eos, p

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None, past_key_values=None):
        B, T = input_ids.shape
        logits = torch.full((B, T, self.vocab), -1e4)
        after = (input_ids[:, -1] == self.a) | (input_ids[:, -1] == self.b)
        logits[after, -1, self.eos] = 0.0
        logits[~after, -1, self.a] = math.log(self.p)
        logits[~after, -1, self.b] = math.log(1 - self.p)
        return SimpleNamespace(logits=logits, past_key_values=None)


def _words(tok, n=2):
    """Ids of ``n`` tokens that each decode to one distinct alphabetic word."""
    found, seen = [], set()
    for i in range(len(tok)):
        w = tok.decode([i]).strip()
        if len(w) > 3 and w.isalpha() and w.lower() not in seen and i not in tok.all_special_ids:
            found.append(i)
            seen.add(w.lower())
        if len(found) == n:
            return found
    raise AssertionError("no word tokens")


def test_the_estimator_is_pass_at_k():
    assert leak_at_k(0, 16, 4) == 0.0 and leak_at_k(16, 16, 1) == 1.0
    assert leak_at_k(3, 16, 1) == pytest.approx(3 / 16)
    assert leak_at_k(1, 16, 16) == 1.0  # k = n: any leaking completion
    assert leak_at_k(2, 5, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))


def test_the_leak_rate_matches_one_minus_one_minus_p_to_the_k(world_tokenizer):
    a, b = _words(world_tokenizer)
    p, n, N = 0.3, 16, 200
    model = FixedNext(len(world_tokenizer), a, b, world_tokenizer.eos_token_id, p)
    answer = world_tokenizer.decode([a]).strip()
    counts = leak_counts(model, world_tokenizer, ["Question: x\nAnswer:"] * N, [answer] * N,
                         LeakConfig(n=n, ks=[1, 4, 16], top_p=1.0, seed=0))
    for k in (1, 4, 16):
        want = 1 - (1 - p) ** k
        got = float(np.mean([leak_at_k(int(c), n, k) for c in counts]))
        assert abs(got - want) <= 4 * math.sqrt(want * (1 - want) / N) + 1e-3, (k, got, want)
    again = leak_counts(model, world_tokenizer, ["Question: x\nAnswer:"] * N, [answer] * N,
                        LeakConfig(n=n, ks=[1], top_p=1.0, seed=0))
    assert (again == counts).all()  # seeded


def test_top_p_keeps_only_the_nucleus(world_tokenizer):
    a, b = _words(world_tokenizer)
    answer = world_tokenizer.decode([a]).strip()
    for p, want in ((0.7, 8), (0.3, 0)):  # top_p 0.5: the nucleus is the likelier token alone
        model = FixedNext(len(world_tokenizer), a, b, world_tokenizer.eos_token_id, p)
        counts = leak_counts(model, world_tokenizer, ["q"] * 5, [answer] * 5, LeakConfig(n=8, ks=[8], top_p=0.5))
        assert (counts == want).all()


def test_the_attack_reads_every_k_and_the_greedy_start(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = leak_attack(world_model, world_tokenizer, task, LeakConfig(n=4, ks=[1, 4], max_items=6))
    check()
    assert set(res) >= {"leak_at_k_1", "leak_at_k_4", "leak_at_k_acc", "leak_at_k_greedy_acc", "leak_at_k_cost"}
    assert res["leak_at_k_acc"] == res["leak_at_k_4"] >= res["leak_at_k_1"]
    assert res["leak_at_k_budget"]["completions"] == 24 and res["leak_at_k_cost"]["forwards"] > 0
    assert (res["leak_at_k_items"], res["leak_at_k_variants"]) == (6, 1)  # 6 of the 12; any-of-k is per question
    with pytest.raises(ConfigError, match="leak_ks"):
        LeakConfig(n=4, ks=[8])
