import numpy as np
import pytest
import torch

import obliviate.attacks.probe as probe_mod
from obliviate.attacks.probe import (fit_choice_probe, fit_value_probe, last_token_hidden, linear_probe_attack,
                                     probe_texts, split_indices)
from obliviate.errors import DataError, ModelError


def _planted(n=80, k=4, d=16, strength=3.0, seed=0):
    """Gaussian features; the correct choice of each MCQ is shifted by ``strength`` along one direction."""
    rng = np.random.default_rng(seed)
    feats = rng.normal(size=(n, k, d))
    answers = rng.integers(0, k, size=n)
    direction = rng.normal(size=d)
    direction /= np.linalg.norm(direction)
    feats[np.arange(n), answers] += strength * direction
    return feats, answers


# Measured on seeds 0-19 (issue #56): with the direction planted, held-out accuracy 0.775-1.0 (mean 0.92; seed 0:
# 0.9); without it, 0.125-0.375 (mean 0.24, chance 0.25). 40 test MCQs: one item is 0.025.


def test_probe_finds_a_planted_direction():
    feats, answers = _planted()
    train, test = split_indices(len(answers), 0.5, seed=0)
    assert fit_choice_probe(feats, answers, train, test) >= 0.7


def test_probe_is_near_chance_without_signal():
    feats, answers = _planted(strength=0.0)
    train, test = split_indices(len(answers), 0.5, seed=0)
    assert fit_choice_probe(feats, answers, train, test) <= 0.5  # chance 0.25


def test_split_is_seeded_disjoint_and_complete():
    train, test = split_indices(10, 0.5, seed=0)
    assert len(train) == 5 and len(test) == 5
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(10))
    assert np.array_equal(split_indices(10, 0.5, seed=0)[0], train)
    assert not np.array_equal(split_indices(10, 0.5, seed=1)[0], train)
    assert [len(x) for x in split_indices(3, 0.9, seed=0)] == [2, 1]  # at least one test MCQ
    with pytest.raises(DataError):
        split_indices(1, 0.5, seed=0)


def test_probe_texts_are_cloze_prompts_per_choice():
    mcq = {"question": "What is Zalosis treated with?", "choices": ["a", "vruroxil"], "answer_index": 1}
    assert probe_texts([mcq]) == ["Question: What is Zalosis treated with?\nAnswer: a",
                                  "Question: What is Zalosis treated with?\nAnswer: vruroxil"]


def test_last_token_hidden_ignores_padding(world_tokenizer, world_model):
    texts = ["Question: What is Zalosis treated with?\nAnswer: vruroxil", "Short text",
             "A somewhat longer text about the disease and its many names."]
    batched = last_token_hidden(world_model, world_tokenizer, texts, [0, 1])
    for i, t in enumerate(texts):
        alone = last_token_hidden(world_model, world_tokenizer, [t], [0, 1])
        for l in (0, 1):
            assert batched[l].shape == (3, 32)
            # float32, padded batch vs one row: rounding of states of size ~1 over d=32 sums, ~1e-7
            np.testing.assert_allclose(batched[l][i], alone[l][0], atol=1e-5)
    # layer 1 is the output of the last block (pre-final-norm), as in obliviate.models.layers
    ids = world_tokenizer(texts[1], add_special_tokens=False)["input_ids"]
    ids = torch.tensor([[world_tokenizer.bos_token_id] + ids])
    with torch.no_grad():
        hs = world_model(input_ids=ids, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(batched[0][1], hs[1][0, -1].numpy(), atol=1e-5)


def test_linear_probe_attack_on_the_world(small_world, world_tokenizer, world_model, unchanged):
    mcqs = small_world.mcqs(split="forget")
    check = unchanged(world_model)
    res = linear_probe_attack(world_model, world_tokenizer, mcqs)
    check()
    assert set(res["per_layer"]) == {0, 1}
    assert all(0.0 <= a <= 1.0 for a in res["per_layer"].values())
    assert res["best_acc"] == max(res["per_layer"].values()) == res["per_layer"][res["best_layer"]]
    assert res["n_train"] + res["n_test"] == len(mcqs) and res["chance"] == 0.25
    only = linear_probe_attack(world_model, world_tokenizer, mcqs, layers=[1])
    assert set(only["per_layer"]) == {1} and only["per_layer"][1] == res["per_layer"][1]
    with pytest.raises(ModelError, match="layer 5"):
        linear_probe_attack(world_model, world_tokenizer, mcqs, layers=[5])


def _value_items(n=60, pool=8, seed=0):
    """MCQ items over one pool of values: each item's value and 3 distractors."""
    rng = np.random.default_rng(seed)
    values = [f"v{i}" for i in range(pool)]
    items = []
    for j in range(n):
        choices = list(rng.choice(values, size=4, replace=False))
        ans = int(rng.integers(4))
        items.append({"prefix": f"p{j}", "value": choices[ans], "choices": choices, "answer_index": ans})
    return items, values


# Measured with items, codes and split drawn from seeds 0-9 (issue #56): the value probe reads 1.0 wherever every test
# value was a training label too (0.90-0.93 on the two seeds with 2-3 unseen ones); on noise 0.13-0.43 (chance 0.25,
# 30 test items: one item is 0.033).


def test_value_probe_reads_a_planted_value_code():
    items, values = _value_items()
    rng = np.random.default_rng(1)
    code = {v: rng.normal(size=12) * 3 for v in values}
    x = np.stack([code[m["value"]] + rng.normal(size=12) for m in items])
    tr, te = split_indices(len(items), 0.5, seed=0)
    acc, unseen = fit_value_probe(x[tr], [items[i]["value"] for i in tr], x[te], [items[i]["choices"] for i in te],
                                  [items[i]["answer_index"] for i in te])
    assert acc >= 0.9 and unseen == 0
    noise = rng.normal(size=x.shape)
    acc0, _ = fit_value_probe(noise[tr], [items[i]["value"] for i in tr], noise[te],
                              [items[i]["choices"] for i in te], [items[i]["answer_index"] for i in te])
    assert acc0 <= 0.5  # chance 0.25 on 30 test items


def test_value_probe_counts_a_value_it_never_trained_on_as_wrong():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]])
    acc, unseen = fit_value_probe(x[:2], ["a", "b"], x[2:], [["c", "a"]], [0])
    assert (acc, unseen) == (0.0, 1)  # "c" was never a training label: the item cannot be answered


def test_value_probe_attack_swaps_halves_and_uses_extra_training_facts(monkeypatch):
    items, values = _value_items(n=40)
    rng = np.random.default_rng(2)
    code = {v: rng.normal(size=8) * 3 for v in values}
    extra = [{"prefix": f"x{i}", "value": v} for i, v in enumerate(values * 2)]
    by_prefix = {m["prefix"]: code[m["value"]] + 0.3 * rng.normal(size=8) for m in items + extra}
    seen = []

    def fake_hidden(model, tok, texts, layers, batch_size=64):
        seen.append(list(texts))
        return {l: np.stack([by_prefix[t] * (l + 1) for t in texts]) for l in layers}

    monkeypatch.setattr(probe_mod, "last_token_hidden", fake_hidden)
    monkeypatch.setattr(probe_mod, "num_layers", lambda m: 2)
    r = probe_mod.value_probe_attack(object(), None, items, extra)
    assert seen == [[m["prefix"] for m in items] + [m["prefix"] for m in extra]]
    # other wordings of a training item's prefix are read too (and never tested)
    for m in items:
        m["train_prefixes"] = [m["prefix"] + "'"]
        by_prefix[m["prefix"] + "'"] = by_prefix[m["prefix"]]
    seen.clear()
    r2 = probe_mod.value_probe_attack(object(), None, items, extra)
    assert seen[0][len(items) + len(extra):] == [m["prefix"] + "'" for m in items] and r2["best_acc"] >= 0.9
    assert r["best_acc"] >= 0.9 and r["chance"] == 0.25 and set(r["per_layer"]) == {0, 1}
    assert r["n_items"] == 40 and r["n_extra"] == len(extra) and r["n_unseen"] == 0
    with pytest.raises(DataError):
        probe_mod.value_probe_attack(object(), None, items[:1])


def test_stratified_halves_put_each_shared_value_in_both():
    from obliviate.attacks.probe import stratified_halves

    values = ["a", "a", "b", "b", "b", "c", "c", "d"]
    for seed in range(5):
        a, b = stratified_halves(values, seed)
        assert sorted(np.concatenate([a, b]).tolist()) == list(range(len(values)))
        assert abs(len(a) - len(b)) <= 1
        for v in "abc":  # held by two or more items: in both halves
            assert {values[i] for i in a} >= {v} and {values[i] for i in b} >= {v}
    assert not np.array_equal(stratified_halves(values, 0)[0], stratified_halves(values, 1)[0])
