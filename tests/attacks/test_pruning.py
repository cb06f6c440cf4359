import torch

from obliviate.attacks.pruning import PruneConfig, neuron_scores, prune_attack, pruned, top_neurons
from obliviate.models.builders import tiny_llama
from obliviate.models.layers import mlp_down_proj
from obliviate.tasks.world import task_from_world


def _down_io(model, ids):
    """Each layer's down-projection input and output, as the module itself received and returned them."""
    seen = {}
    hs = [mlp_down_proj(model, l).register_forward_hook(
        lambda m, a, o, l=l: seen.__setitem__(l, (a[0].detach().clone(), o.detach().clone()))) for l in range(2)]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    for h in hs:
        h.remove()
    return seen, logits


def test_the_pruned_neurons_output_exactly_zero_and_the_rest_are_unchanged():
    model = tiny_llama(vocab_size=20, n_layer=2, d_model=16, n_head=2, seed=0).eval()
    ids = torch.tensor([[1, 5, 7, 3, 9]])
    before, logits0 = _down_io(model, ids)
    idx = torch.tensor([0, 3, 17])
    with pruned(model, {1: idx}):
        after, _ = _down_io(model, ids)
    keep = torch.ones(before[1][0].shape[-1], dtype=torch.bool)
    keep[idx] = False
    assert (after[1][0][..., idx] == 0).all()  # the pruned neurons send nothing
    assert torch.equal(after[1][0][..., keep], before[1][0][..., keep])  # the others as before
    assert torch.equal(after[0][0], before[0][0]) and torch.equal(after[0][1], before[0][1])  # the layer below too
    W = mlp_down_proj(model, 1).weight
    # float32: the zeroed columns left out of the d_ff-term sums (terms < 1) change their rounding only, ~1e-7
    assert torch.allclose(after[1][1], before[1][0][..., keep] @ W[:, keep].T, atol=1e-6)
    again, logits1 = _down_io(model, ids)  # the hooks are gone
    assert torch.equal(logits1, logits0)


def test_the_top_fraction_is_ranked_over_every_layer():
    scores = neuron_scores({0: torch.tensor([0.0, 1.0, 5.0, 0.0]), 1: torch.tensor([2.0, 0.0, 0.0, 9.0])},
                           {0: torch.zeros(4), 1: torch.tensor([0.0, 0.0, 0.0, 1.0])})
    assert {l: v.tolist() for l, v in top_neurons(scores, 0.25).items()} == {0: [2], 1: [3]}
    assert {l: v.tolist() for l, v in top_neurons(scores, 0.01).items()} == {1: [3]}  # at least one


def test_the_sweep_reports_its_best_point(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = prune_attack(world_model, world_tokenizer, task, PruneConfig(fractions=[0.01, 0.1]))
    check()
    points = res["prune_by_fraction"]
    assert set(points) == {"0.01", "0.1"} and points["0.1"]["neurons"] > points["0.01"]["neurons"]
    assert res["prune_forget_score"] == max(p["forget_score"] for p in points.values())
    assert res["prune_cost"]["forwards"] > 0
    assert (res["prune_items"], res["prune_variants"]) == (12, 2)  # the world's 12 forget QA, the best of 2 points


def test_fractions_that_zero_the_same_neurons_are_one_variant(small_world, world_tokenizer, world_model,
                                                              cut_forget):
    """The sweep's best is a maximum over the distinct pruned models it scored, on the forget items it scored."""
    task = cut_forget(task_from_world(small_world), 7)
    res = prune_attack(world_model, world_tokenizer, task, PruneConfig(fractions=[0.001, 0.002, 0.1]))
    n = {f: p["neurons"] for f, p in res["prune_by_fraction"].items()}
    assert n["0.001"] == n["0.002"] == 1 < n["0.1"]  # both round to one neuron: the same model twice
    assert (res["prune_items"], res["prune_variants"]) == (7, 2)
