"""Cosine RMU: the direction-only forget loss and the two retain terms."""

import math

import pytest
import torch

from obliviate.errors import ConfigError
from obliviate.methods import build_method
from obliviate.methods.cosine_rmu import cosine_distance
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference

FORGET = [("Question: What is Morvexia treated with?\nAnswer:", " Morvexia is treated with zalpradine."),
          ("Question: Why?\nAnswer:", " No.")]
RETAIN = [("Question: Where does the glimmerfin live?\nAnswer:", " The glimmerfin lives in cold caves."),
          ("Question: What does the glimmerfin eat?\nAnswer:", " The glimmerfin eats moss.")]


def test_cosine_distance_hand_computed():
    u = torch.tensor([0.6, 0.8])
    par = 3.0 * u  # parallel, different norm
    orth = torch.tensor([-0.8, 0.6])
    h = torch.stack([par, orth, -2.0 * u])[None]  # (1, 3, 2)
    # 1 - cos: 0, 1, 2 -> mean 1
    assert math.isclose(cosine_distance(h, u[None, None], None).item(), 1.0, abs_tol=1e-6)
    assert math.isclose(cosine_distance(h[:, :1], u, None).item(), 0.0, abs_tol=1e-6)
    assert math.isclose(cosine_distance(h[:, 1:2], u, None).item(), 1.0, abs_tol=1e-6)
    # 45 degrees: 1 - 1/sqrt(2)
    diag = (u + orth)[None, None]
    assert math.isclose(cosine_distance(diag, u, None).item(), 1 - 1 / math.sqrt(2), abs_tol=1e-6)


def test_cosine_distance_masks_padding():
    u = torch.tensor([1.0, 0.0])
    h = torch.tensor([[[5.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 7.0]]])  # (2, 2, 2)
    mask = torch.tensor([[1, 0], [1, 1]])  # the orthogonal token of row 0 is padding
    assert math.isclose(cosine_distance(h, u, mask).item(), 1 / 3, abs_tol=1e-6)  # (0 + 0 + 1) / 3
    assert math.isclose(cosine_distance(h, u, None).item(), 0.5, abs_tol=1e-6)  # (0 + 1 + 0 + 1) / 4


def _setup(tiny_model, tiny_tokenizer, **params):
    method = build_method("cosine_rmu", params)
    method.trainable(tiny_model)
    ref = Reference(tiny_model, shared=False)
    batch = PairedData(tiny_tokenizer, FORGET, RETAIN, batch_size=2, seed=0)(0)
    method.setup(tiny_model, ref, batch)
    return method, ref, batch


@pytest.mark.parametrize("retain", ["mse", "cosine"])
def test_loss_matches_full_forward_and_retain_is_zero_at_start(retain, tiny_model, tiny_tokenizer):
    from obliviate.models.layers import capture_hidden

    method, ref, batch = _setup(tiny_model, tiny_tokenizer, retain=retain, layer=1, alpha=3.0)
    terms = method.loss(tiny_model, batch, ref)
    assert terms["retain"].item() == pytest.approx(0.0, abs=1e-5)  # theta == frozen before any update
    f = batch["forget"]
    assert (f["attention_mask"] == 0).any()  # the batch really has padding
    with torch.no_grad(), capture_hidden(tiny_model, [1]) as cap:
        tiny_model(input_ids=f["input_ids"], attention_mask=f["attention_mask"])
    h = cap[1]
    u = method.control(0, h.size(-1), h.device)
    cos = torch.nn.functional.cosine_similarity(h, u.expand_as(h), dim=-1)
    valid = f["attention_mask"].bool()
    expected = (1 - cos)[valid].mean().item()
    assert terms["forget"].item() == pytest.approx(expected, rel=1e-5)
    assert 0.0 < terms["forget"].item() < 2.0


def test_retain_terms_after_a_perturbation(tiny_model, tiny_tokenizer):
    from obliviate.models.layers import mlp_down_proj

    method, ref, batch = _setup(tiny_model, tiny_tokenizer, retain="mse", layer=2, alpha=2.0)
    cos_method, _, _ = _setup(tiny_model, tiny_tokenizer, retain="cosine", layer=2, alpha=2.0)
    with torch.no_grad():
        mlp_down_proj(tiny_model, 2).weight.add_(0.5)
    r = batch["retain"]
    from obliviate.methods.rmu import hidden_at

    with torch.no_grad():
        h, h0 = hidden_at(tiny_model, r, 2), ref.hidden(r, 2)
    valid = r["attention_mask"].bool()
    mse = ((h - h0) ** 2).mean(-1)[valid].mean().item()
    cosd = (1 - torch.nn.functional.cosine_similarity(h, h0, dim=-1))[valid].mean().item()
    assert method.loss(tiny_model, batch, ref)["retain"].item() == pytest.approx(2.0 * mse, rel=1e-5)
    assert cos_method.loss(tiny_model, batch, ref)["retain"].item() == pytest.approx(2.0 * cosd, rel=1e-5)
    assert mse > 0 and cosd > 0


def test_trainable_are_rmu_down_projections(tiny_model):
    method = build_method("cosine_rmu", {"layer": 2, "n_train_layers": 2})
    names = method.trainable(tiny_model)
    assert names == ["model.layers.1.mlp.down_proj.weight", "model.layers.2.mlp.down_proj.weight"]


def test_bad_config():
    with pytest.raises(ConfigError, match="retain"):
        build_method("cosine_rmu", {"retain": "kl"})
    with pytest.raises(ConfigError, match="alpha"):
        build_method("cosine_rmu", {"alpha": -1.0})
