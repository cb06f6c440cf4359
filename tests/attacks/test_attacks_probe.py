import numpy as np
import pytest
import torch

from obliviate.attacks.probe import fit_choice_probe, last_token_hidden, linear_probe_attack, probe_texts, split_indices
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


def test_probe_finds_a_planted_direction():
    feats, answers = _planted()
    train, test = split_indices(len(answers), 0.5, seed=0)
    assert fit_choice_probe(feats, answers, train, test) >= 0.9


def test_probe_is_near_chance_without_signal():
    feats, answers = _planted(strength=0.0)
    train, test = split_indices(len(answers), 0.5, seed=0)
    assert fit_choice_probe(feats, answers, train, test) <= 0.5  # chance 0.25; 40 test MCQs


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
