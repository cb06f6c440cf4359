import pytest
import torch

from obliviate.attacks.gcg import (GCGConfig, coordinate_candidates, gcg_attack, gcg_step, suffix_gradient,
                                   suffix_items, suffix_losses)
from obliviate.attacks.prefix import prefix_attack
from obliviate.models.builders import tiny_llama
from obliviate.tasks.world import task_from_world

V = 12
ITEMS = [([0, 3, 4], [5], [7, 8]), ([0, 6], [5], [9]), ([0, 4, 4, 3], [5], [10, 7])]  # (pre, post, answer)


def _model(seed=0):
    return tiny_llama(vocab_size=V, n_layer=2, d_model=16, n_head=2, seed=seed)


PREFIX_ITEMS = [([0], [3, 4, 5], [7, 8]), ([0], [6, 5], [9]), ([0], [4, 4, 3, 5], [10, 7])]  # tokens after bos


@pytest.mark.parametrize("items", [ITEMS, PREFIX_ITEMS], ids=["suffix", "prefix"])
def test_one_exhaustive_coordinate_step_is_brute_force(items):
    """With topk = V and room for every (position, token) pair, a GCG step is the best single substitution; the
    prefix's items put the optimised tokens right after bos, before the question: the same step."""
    model = _model()
    suffix = torch.tensor([1, 2])
    cfg = GCGConfig(m=2, topk=V, candidates=2 * V)
    new, loss = gcg_step(model, items, suffix, None, cfg, torch.Generator().manual_seed(0), pad=11)
    brute = []
    for pos in range(2):
        for tok in range(V):
            s = suffix.clone()
            s[pos] = tok
            brute.append((float(suffix_losses(model, items, s[None], pad=11)[0][0]), s.tolist()))
    best_loss, best = min(brute)
    assert abs(loss - best_loss) < 1e-6 and new.tolist() == best


def test_the_embedding_path_scores_as_the_token_path():
    """The gradient's forward (the suffix as one-hot @ embedding) gives the loss of the token ids themselves."""
    model = _model()
    suffix = torch.tensor([1, 2])
    grad, loss = suffix_gradient(model, ITEMS, suffix, pad=11)
    assert grad.shape == (2, V)
    assert abs(loss - float(suffix_losses(model, ITEMS, suffix[None], pad=11)[0][0])) < 1e-5


def test_candidates_change_one_position_to_a_top_token():
    grad = torch.zeros(3, 5)
    grad[0, 4] = grad[1, 2] = grad[2, 0] = -1.0  # the most negative entry per position
    cand = coordinate_candidates(grad, torch.tensor([1, 1, 1]), topk=1, n=10, gen=torch.Generator())
    assert cand.tolist() == [[4, 1, 1], [1, 2, 1], [1, 1, 0]]  # exhaustive: 3 x 1 <= 10
    allowed = torch.tensor([True, True, False, True, True])
    cand = coordinate_candidates(grad, torch.tensor([1, 1, 1]), topk=1, n=10, gen=torch.Generator(), allowed=allowed)
    assert 2 not in cand[:, 1].tolist()
    sampled = coordinate_candidates(grad, torch.tensor([1, 1, 1]), topk=2, n=4, gen=torch.Generator().manual_seed(0))
    assert sampled.shape == (4, 3) and ((sampled != 1).sum(1) <= 1).all()


def test_the_loss_decreases_and_the_model_is_untouched(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = gcg_attack(world_model, world_tokenizer, task, GCGConfig(m=3, iterations=3, topk=8, candidates=16))
    check()
    assert all(p.grad is None for p in world_model.parameters())
    assert res["gcg_train_loss"] < res["gcg_train_loss_start"]
    assert res["gcg_budget"]["evaluations"] == 48 and len(res["gcg_suffix_ids"]) == 3
    assert res["gcg_cost"]["backwards"] == 3 and res["gcg_cost"]["forwards"] > 3
    assert 0 <= res["gcg_acc"] <= 1 and 0 <= res["gcg_start_acc"] <= 1
    assert (res["gcg_items"], res["gcg_variants"]) == (len(task.forget_halves()[1]), 1) == (6, 1)  # half B


def test_the_suffix_sits_between_the_question_and_the_answer_cue(small_world, world_tokenizer):
    task = task_from_world(small_world)
    (pre, post, ans), = suffix_items(task, world_tokenizer, [("What is Zalosis treated with?", "vruroxil")])
    assert world_tokenizer.decode(pre, skip_special_tokens=True) == "Question: What is Zalosis treated with?"
    assert world_tokenizer.decode(post).strip() == "Answer:"
    assert world_tokenizer.decode(ans).strip() == "vruroxil"


def test_the_prefix_sits_right_before_the_question(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    (pre, post, ans), = suffix_items(task, world_tokenizer, [("What is Zalosis treated with?", "vruroxil")], "prefix")
    assert world_tokenizer.decode(pre, skip_special_tokens=True).strip() == "Question:"
    assert world_tokenizer.decode(post).strip() == "What is Zalosis treated with?\nAnswer:"
    check = unchanged(world_model)
    res = prefix_attack(world_model, world_tokenizer, task, GCGConfig(m=2, iterations=2, topk=4, candidates=8,
                                                                      max_items=4))
    check()
    assert (res["gcg_prefix_items"], res["gcg_prefix_variants"]) == (4, 1)  # half B (6 facts) cut to max_items
    assert res["gcg_prefix_train_loss"] <= res["gcg_prefix_train_loss_start"]
    assert len(res["gcg_prefix_prefix_ids"]) == 2 and res["gcg_prefix_budget"]["evaluations"] == 16
