import torch

from obliviate.attacks.gcg import suffix_losses
from obliviate.attacks.soft_prompt import SoftPromptConfig, hits, optimise, project, soft_prompt_attack
from obliviate.models.builders import tiny_llama
from obliviate.models.layers import input_embeddings
from obliviate.tasks.world import task_from_world

V = 12
ITEMS = [([0], [3, 4, 5], [7, 8]), ([0], [6, 5], [9]), ([0], [4, 4, 3, 5], [10, 7])]  # (bos, question, answer)


def test_the_loss_decreases_and_every_embedding_stays_in_the_ball():
    model = tiny_llama(vocab_size=V, n_layer=2, d_model=16, n_head=2, seed=0)
    W = input_embeddings(model).weight.detach()
    r = 2.0 * float(W.norm(dim=1).median())
    init = W[[1, 2, 1]].clone() * 6  # outside the ball: the first projection binds
    P, losses, norms = optimise(model, ITEMS, init, r, steps=15, lr=0.1, pad=11)
    assert len(losses) == 16 and losses[-1] < losses[0] - 0.02
    assert max(norms) <= r * (1 + 1e-6) and float(P.norm(dim=1).max()) <= r * (1 + 1e-6)
    assert abs(max(norms) - r) < 1e-4  # the projection was active
    assert all(p.grad is None for p in model.parameters())


def test_the_projection_scales_only_rows_outside_the_ball():
    P = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    project(P, 1.0)
    assert torch.allclose(P, torch.tensor([[0.6, 0.8], [0.3, 0.4]]))


def test_without_a_soft_prompt_the_read_is_the_token_paths():
    model = tiny_llama(vocab_size=V, n_layer=2, d_model=16, n_head=2, seed=0)
    P = torch.zeros(0, 16)
    assert hits(model, ITEMS, P, pad=11).tolist() == suffix_losses(model, ITEMS, torch.zeros(1, 0, dtype=torch.long),
                                                                     pad=11)[1][0].tolist()


def test_the_attack_reports_its_budget_and_leaves_the_model(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = soft_prompt_attack(world_model, world_tokenizer, task, SoftPromptConfig(m=2, steps=3, folds=2))
    check()
    assert res["soft_prompt_budget"]["steps_x_m"] == 6 and res["soft_prompt_budget"]["folds"] == 2
    assert res["soft_prompt_max_norm"] <= res["soft_prompt_radius"] * (1 + 1e-6)
    assert res["soft_prompt_cost"]["backwards"] == 6 and 0 <= res["soft_prompt_acc"] <= 1
    assert res["soft_prompt_train_loss"] < res["soft_prompt_train_loss_start"]
    # the mean of fold B means over 3 and 6 facts: variance p(1 - p)(1/3 + 1/6) / 4 = p(1 - p) / 8, so 8 items
    assert [len(b) for _, _, b in task.forget_folds()[:2]] == [3, 6]
    assert (res["soft_prompt_items"], res["soft_prompt_variants"]) == (8, 1)
