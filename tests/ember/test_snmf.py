"""SNMF: the multiplicative update, winner-takes-all, feature selection, the MLP edit and restore."""

import math

import pytest
import torch

from obliviate.methods.snmf import (
    edit_mlp_feature,
    relative_error,
    restore_mlp,
    select_features,
    snapshot_mlp,
    snmf_factorize,
    snmf_update_G,
)
from obliviate.errors import ConfigError
from obliviate.models.layers import down_proj_weight_out_in, up_proj_weight_out_in


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_update_G_hand_computed():
    # A = [[1]], F = [[1, -1]], G = [[1, 1]]: P = [1, -1], Q = [[1, -1], [-1, 1]]
    # G Q- = [1, 1], G Q+ = [1, 1] -> G' = [sqrt((1 + 1) / 1), sqrt((0 + 1) / (1 + 1))]
    G = snmf_update_G(torch.tensor([[1.0]]), torch.tensor([[1.0, -1.0]]), torch.tensor([[1.0, 1.0]]), eps=0.0)
    assert torch.allclose(G, torch.tensor([[math.sqrt(2.0), math.sqrt(0.5)]]))
    # A = [[-1, 3]], F = [[2]], G = [[1], [1]]: P = [-2, 6], Q = 4 -> G' = [0, sqrt(6 / 4)]
    G = snmf_update_G(torch.tensor([[-1.0, 3.0]]), torch.tensor([[2.0]]), torch.ones(2, 1), eps=0.0)
    assert torch.allclose(G, torch.tensor([[0.0], [math.sqrt(1.5)]]))


def test_update_G_keeps_nonnegative_and_never_increases_loss():
    gen = torch.Generator().manual_seed(0)
    A = torch.rand(20, 50, generator=gen)  # non-negative synthetic data
    F = torch.randn(20, 4, generator=gen)  # signed features, fixed
    G = torch.rand(50, 4, generator=gen)
    losses = [relative_error(A, F, G)]
    for _ in range(15):
        G = snmf_update_G(A, F, G)
        assert (G >= 0).all()
        losses.append(relative_error(A, F, G))
    assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < losses[0] - 1e-3


def test_factorize_wta_keeps_ceil_one_percent_per_column_and_is_deterministic():
    gen = torch.Generator().manual_seed(1)
    A = torch.relu(torch.randn(150, 60, generator=gen))
    r1 = snmf_factorize(A, K=5, sparsity=0.01, n_iter=30, seed=3)
    r2 = snmf_factorize(A, K=5, sparsity=0.01, n_iter=30, seed=3)
    assert ((r1.F != 0).sum(0) == math.ceil(0.01 * 150)).all()  # 2 per column
    assert (r1.G >= 0).all()
    assert torch.equal(r1.F, r2.F) and torch.equal(r1.G, r2.G)
    assert r1.loss == min(r1.losses) and r1.loss < 1.0  # better than F G^T = 0 (data and init seeds 0-9: 0.930-0.947)
    with pytest.raises(ConfigError, match="K=0"):
        snmf_factorize(A, K=0)


def test_select_features_by_mass_ratio():
    G = torch.tensor([[2.0, 0.0], [2.0, 1.0], [1.0, 1.0], [0.0, 2.0]])
    codes = torch.tensor([1, 1, 0, 0])
    # ratio_0 = mean(2, 2) / mean(1, 0) = 4; ratio_1 = mean(0, 1) / mean(1, 2) = 1/3
    feats, ratios = select_features(G, codes, min_ratio=2.0)
    assert feats == [0]
    assert torch.allclose(ratios, torch.tensor([4.0, 1 / 3]), atol=1e-6)


def test_edit_changes_only_support_and_restore_is_bit_exact(tiny_model):
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    W = down_proj_weight_out_in(tiny_model, 1)
    f = torch.zeros(W.shape[1])
    f[3], f[7] = 3.0, -4.0
    snap = snapshot_mlp(tiny_model, [1])
    S = edit_mlp_feature(tiny_model, 1, f, delta=1.0)
    assert S == [3, 7]
    u = torch.tensor([0.6, -0.8])
    W, U = down_proj_weight_out_in(tiny_model, 1), up_proj_weight_out_in(tiny_model, 1)
    # delta = 1 projects u out: W_down[:, S] u = 0 and u^T W_up[S, :] = 0
    # float32 cancellation of two terms of size < 1: ~1e-7
    assert torch.allclose(W[:, S] @ u, torch.zeros(W.shape[0]), atol=1e-6)
    assert torch.allclose(u @ U[S, :], torch.zeros(U.shape[1]), atol=1e-6)
    other = [j for j in range(W.shape[1]) if j not in S]
    changed = {n for n, p in tiny_model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"model.layers.1.mlp.down_proj.weight", "model.layers.1.mlp.up_proj.weight"}
    W0 = before["model.layers.1.mlp.down_proj.weight"]
    U0 = before["model.layers.1.mlp.up_proj.weight"]
    assert torch.equal(W[:, other], W0[:, other]) and not torch.equal(W[:, S], W0[:, S])
    assert torch.equal(U[other], U0[other]) and not torch.equal(U[S], U0[S])
    restore_mlp(tiny_model, snap)
    assert all(torch.equal(p, before[n]) for n, p in tiny_model.named_parameters())


def test_snmf_edit_method_on_a_tiny_concept(tiny_model, tiny_tokenizer):
    from obliviate.methods import build_method, get_method

    assert get_method("snmf").kind == "edit"
    data = {"concept_sentences": ["Doctors treat Morvexia with zalpradine.", "Morvexia causes cold skin."],
            "neutral_sentences": ["The glimmerfin eats moss.", "Ilsa Varnholt was a weaver in Dremmin."]}
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    method = build_method("snmf", {"K": 16, "n_iter": 30, "layers": [2], "sparsity": 0.05})
    summary = method.edit(tiny_model, tiny_tokenizer, data)
    assert summary["method"] == "snmf" and "2" in summary["layers"]
    changed = {n for n, p in tiny_model.named_parameters() if not torch.equal(p, before[n])}
    assert changed <= {"model.layers.2.mlp.down_proj.weight", "model.layers.2.mlp.up_proj.weight"}
    assert summary["n_features"] >= 1 and all(r >= 2.0 for r in summary["layers"]["2"]["ratios"])
    assert changed == {"model.layers.2.mlp.down_proj.weight", "model.layers.2.mlp.up_proj.weight"}
    method.restore(tiny_model)
    assert all(torch.equal(p, before[n]) for n, p in tiny_model.named_parameters())
