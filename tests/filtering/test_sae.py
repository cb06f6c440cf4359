"""TopK SAE: exact sparsity, training reduces the loss, save/load, residual activations aligned with labels."""

import numpy as np
import pytest
import torch

from obliviate.data import TokenDataset
from obliviate.errors import ConfigError, DataError
from obliviate.filtering.sae import TopKSAE, residual_activations, train_sae


def sparse_data(n=2048, d=16, atoms=32, active=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    D = torch.nn.functional.normalize(torch.randn(atoms, d, generator=g), dim=1)
    codes = torch.zeros(n, atoms)
    idx = torch.stack([torch.randperm(atoms, generator=g)[:active] for _ in range(n)])
    codes.scatter_(1, idx, torch.rand(n, active, generator=g) + 0.5)
    return codes @ D


def test_topk_keeps_exactly_k_latents_at_the_largest_preactivations():
    sae = TopKSAE(d=8, m=20, k=3, seed=0)
    with torch.no_grad():
        sae.b_enc.fill_(10.0)  # every pre-activation positive, so ReLU zeroes none of the top k
    x = torch.randn(50, 8)
    z = sae.encode(x)
    assert ((z != 0).sum(1) == 3).all()
    top = sae.pre_activations(x).topk(3, dim=1).indices
    assert torch.equal(torch.sort(top, 1).values, torch.sort(torch.nonzero(z)[:, 1].view(50, 3), 1).values)
    # with a negative bias fewer than k can be positive: never more than k non-zeros, none negative
    with torch.no_grad():
        sae.b_enc.fill_(-0.5)
    z = sae.encode(x)
    assert ((z != 0).sum(1) <= 3).all() and (z >= 0).all()


def test_training_reduces_loss_and_decoder_rows_are_unit_norm(tmp_path):
    x = sparse_data()
    sae, info = train_sae(x, n_latents=32, k=4, steps=150, lr=3e-3, seed=0, batch_size=256)
    assert info["mse_after"] < 0.3 * info["mse_before"]
    assert info["fvu"] < 0.5
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(32), atol=1e-5)
    path = sae.save(tmp_path / "sae.safetensors")
    loaded = TopKSAE.load(path)
    assert loaded.k == 4
    assert torch.allclose(loaded.encode(x[:10]), sae.encode(x[:10]), atol=1e-6)
    assert torch.allclose(loaded.encode_all(x, chunk=700), sae.encode_all(x), atol=1e-6)


def test_bad_sae_arguments(tmp_path):
    with pytest.raises(ConfigError, match="k=0"):
        TopKSAE(4, 8, 0)
    with pytest.raises(DataError):
        train_sae(torch.zeros(0, 4), 8, 2, steps=1)
    with pytest.raises(DataError):
        TopKSAE.load(tmp_path / "missing.safetensors")


def test_residual_activations_match_a_plain_forward_and_labels_align(tiny_model):
    seqs = [np.array([1, 20, 21, 22, 2]), np.array([1, 30, 2]), np.array([1, 40, 41, 42, 43, 44, 2])]
    labels = {"domain": [np.array([0, 1, 1, 1, 0]), np.array([0, 2, 0]), np.array([0, 1, 2, 1, 2, 1, 0])]}
    ds = TokenDataset(seqs, labels, {"domain": ["none", "medicine", "biology"]})
    acts, flat = residual_activations(tiny_model, ds, layer=1, batch_size=2)
    assert acts.shape == (15, 32)
    np.testing.assert_array_equal(flat["domain"], np.concatenate(labels["domain"]))
    # row of sequence 2, token 3 = output of layer 1 (hidden_states[2]) of that sequence alone
    with torch.no_grad():
        hs = tiny_model(input_ids=torch.as_tensor(seqs[2])[None], output_hidden_states=True).hidden_states[2][0]
    # float32, a padded batch of two vs the sequence alone: rounding of states of size ~1 (d = 32 sums), ~1e-7
    torch.testing.assert_close(acts[5 + 3 + 3], hs[3], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(acts[8:], hs, atol=1e-5, rtol=1e-4)
