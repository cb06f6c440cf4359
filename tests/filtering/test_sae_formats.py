"""SAEs trained elsewhere (SAELens, EleutherAI sparsify, Gemma Scope) load into the weak-label pipeline and
encode exactly as their own definitions say."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from obliviate.errors import DataError
from obliviate.filtering import PretrainedSAE, TopKSAE, load_sae

D, M, K = 12, 40, 5


@pytest.fixture
def weights():
    g = torch.Generator().manual_seed(0)
    return {"W_enc": torch.randn(D, M, generator=g), "b_enc": torch.randn(M, generator=g) * 0.1,
            "W_dec": torch.randn(M, D, generator=g), "b_dec": torch.randn(D, generator=g) * 0.1,
            "threshold": torch.rand(M, generator=g)}


def x():
    return torch.randn(30, D, generator=torch.Generator().manual_seed(1))


def _topk(pre, k):
    v, i = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter_(-1, i, v)


def test_saelens_standard_topk_and_jumprelu(tmp_path, weights):
    w = weights
    cases = {
        "standard": ({"architecture": "standard", "apply_b_dec_to_input": True},
                     F.relu((x() - w["b_dec"]) @ w["W_enc"] + w["b_enc"])),
        "topk": ({"architecture": "topk", "activation_fn_kwargs": {"k": K}, "apply_b_dec_to_input": True},
                 _topk(F.relu((x() - w["b_dec"]) @ w["W_enc"] + w["b_enc"]), K)),
        "jumprelu": ({"architecture": "jumprelu", "apply_b_dec_to_input": False},
                     (lambda p: p * (p > w["threshold"]))(x() @ w["W_enc"] + w["b_enc"])),
    }
    for arch, (cfg, want) in cases.items():
        d = tmp_path / arch
        d.mkdir()
        (d / "cfg.json").write_text(json.dumps({**cfg, "d_in": D, "d_sae": M, "hook_name": "blocks.7.hook_resid_post"}))
        save_file({k: v for k, v in w.items() if arch == "jumprelu" or k != "threshold"},
                  str(d / "sae_weights.safetensors"))
        sae = load_sae(d)
        assert isinstance(sae, PretrainedSAE) and sae.layer == 7 and sae.n_latents == M and sae.d == D
        assert torch.allclose(sae.encode_all(x()), want, atol=1e-5), arch
        assert torch.allclose(sae.decode(want), want @ w["W_dec"] + w["b_dec"], atol=1e-5)


def test_sparsify_layout_loads_as_its_topk_encoder(tmp_path, weights):
    w = weights
    d = tmp_path / "layers.3"
    d.mkdir()
    (d / "cfg.json").write_text(json.dumps({"expansion_factor": 4, "normalize_decoder": True, "num_latents": M,
                                            "k": K, "d_in": D}))
    enc = torch.nn.Linear(D, M)
    with torch.no_grad():
        enc.weight.copy_(w["W_enc"].t())
        enc.bias.copy_(w["b_enc"])
    save_file({"encoder.weight": enc.weight.detach().clone(), "encoder.bias": enc.bias.detach().clone(),
               "W_dec": w["W_dec"], "b_dec": w["b_dec"]}, str(d / "sae.safetensors"))
    sae = load_sae(d)
    want = _topk(F.relu(enc(x() - w["b_dec"])), K).detach()  # sparsify: relu(encoder(x - b_dec)), top k
    assert sae.layer == 3 and sae.source == "sparsify"
    assert torch.allclose(sae.encode_all(x()), want, atol=1e-5)


def test_gemma_scope_npz(tmp_path, weights):
    d = tmp_path / "layer_20" / "width_16k" / "average_l0_71"
    d.mkdir(parents=True)
    np.savez(d / "params.npz", **{k: v.numpy() for k, v in weights.items()})
    sae = load_sae(d)
    pre = x() @ weights["W_enc"] + weights["b_enc"]
    assert sae.layer == 20
    assert torch.allclose(sae.encode_all(x()), F.relu(pre) * (pre > weights["threshold"]), atol=1e-5)


def test_our_own_file_still_loads_and_bad_inputs_are_one_line(tmp_path, weights):
    ours = TopKSAE(D, M, K, seed=3)
    path = ours.save(tmp_path / "ours.safetensors")
    assert isinstance(load_sae(path), TopKSAE)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no SAE found"):
        load_sae(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cfg.json").write_text(json.dumps({"architecture": "standard"}))
    save_file({"W_enc": weights["W_enc"], "b_enc": weights["b_enc"], "W_dec": weights["W_dec"][:, :3].contiguous(),
               "b_dec": weights["b_dec"]}, str(bad / "sae_weights.safetensors"))
    with pytest.raises(DataError, match="W_dec"):
        load_sae(bad)
    (bad / "cfg.json").write_text(json.dumps({"architecture": "gated"}))
    with pytest.raises(DataError, match="gated"):
        load_sae(bad)
