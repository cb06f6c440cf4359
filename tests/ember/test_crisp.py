"""CRISP: feature ranking, the loss terms, and the registered method on a tiny model."""

import math

import pytest
import torch

from obliviate.methods.crisp import crisp_terms, feature_scores, firing_counts, rank_features, unlearn_term
from obliviate.filtering.sae import TopKSAE

# 5 target tokens and 5 benign tokens x 4 features; > 0 = fires.
TARGET = torch.tensor([[1.0, 0.0, 2.0, 0.0],
                       [1.0, 1.0, 2.0, 0.0],
                       [1.0, 1.0, 0.0, 0.0],
                       [1.0, 1.0, 2.0, 0.0],
                       [1.0, 0.0, 2.0, 0.0]])
BENIGN = torch.tensor([[1.0, 0.0, 1.0, 0.0],
                       [0.0, 0.0, 1.0, 3.0],
                       [0.0, 0.0, 0.0, 0.0],
                       [0.0, 0.0, 0.0, 0.0],
                       [0.0, 0.0, 0.0, 0.0]])


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_rank_features_on_a_hand_made_firing_matrix():
    t, b = firing_counts(TARGET), firing_counts(BENIGN)
    assert t.tolist() == [5, 3, 4, 0] and b.tolist() == [1, 0, 2, 1]
    score, ratio = feature_scores(t, b)
    assert score.tolist() == [4, 3, 2, -1]
    assert ratio.tolist() == [5.0, math.inf, 2.0, 0.0]
    assert rank_features(t, b, min_ratio=3.0, top_k=10) == [0, 1]  # f2 has ratio 2 < 3; f3 never fires on target
    assert rank_features(t, b, min_ratio=3.0, top_k=1) == [0]
    assert rank_features(t, b, min_ratio=2.0, top_k=10) == [0, 1, 2]


def _identity_sae():
    sae = TopKSAE(2, 2, 1)
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae.requires_grad_(False)


def test_unlearn_term_is_the_mean_positive_preactivation():
    sae = _identity_sae()  # pre-activation = x
    h = torch.tensor([[[1.0, -2.0], [3.0, 4.0]]])  # (B=1, T=2, d=2)
    # token 0: relu(1, -2) -> mean 0.5; token 1: relu(3, 4) -> mean 3.5
    assert float(unlearn_term(sae, h, torch.tensor([[1, 0]]), [0, 1])) == pytest.approx(0.5)
    assert float(unlearn_term(sae, h, torch.tensor([[1, 1]]), [0, 1])) == pytest.approx(2.0)
    assert float(unlearn_term(sae, h, None, [1])) == pytest.approx(2.0)  # relu(-2) = 0, relu(4) = 4 -> 2
    assert float(unlearn_term(sae, h, None, [])) == 0.0


def test_crisp_terms_weights():
    terms = crisp_terms(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0), beta=0.99, gamma=0.01)
    assert terms["unlearn"].item() == pytest.approx(0.01)
    assert terms["reg"].item() == pytest.approx(1.98)
    assert terms["coh"].item() == pytest.approx(0.99 * 0.01 * 3.0)


def test_crisp_fit_and_loss_on_a_tiny_model(tiny_model, tiny_tokenizer):
    from obliviate.methods import build_method
    from obliviate.unlearning.paired import PairedData
    from obliviate.unlearning.reference import Reference

    target = ["Doctors treat Morvexia with zalpradine.", "Morvexia causes cold skin and zalpradine cures it."] * 2
    benign = ["The glimmerfin eats moss and its cells glow.", "Ilsa Varnholt was born in Dremmin in 1832."] * 2
    method = build_method("crisp", {"sae_steps": 60, "min_ratio": 2.0,
                                    "target_texts": target, "benign_texts": benign,
                                    "coherence_prompts": ["The glimmerfin lives", "Ilsa Varnholt was"]})
    info = method.fit(tiny_model, tiny_tokenizer)
    assert list(info) == [2] and info[2]["features"]  # middle layer of 4
    for j, t, b in zip(info[2]["features"], info[2]["target_fires"], info[2]["benign_fires"]):
        assert t > 0 and (b == 0 or t / b >= 2.0)
    ref = Reference(tiny_model, shared=False)
    batch = PairedData(tiny_tokenizer, [(t, " yes") for t in target], [(b, " ok") for b in benign], 2, 0)(0)
    terms = method.loss(tiny_model, batch, ref)
    assert set(terms) == {"unlearn", "reg", "coh"}
    assert all(torch.isfinite(v) for v in terms.values())
    assert terms["reg"].item() == pytest.approx(0.0, abs=1e-10)  # the model still equals the reference
    assert terms["coh"].item() == pytest.approx(0.0, abs=1e-10)
    assert terms["unlearn"].item() > 0
    sum(terms.values()).backward()
    assert tiny_model.model.layers[2].mlp.down_proj.weight.grad.abs().sum() > 0


def test_crisp_config_errors():
    from obliviate.errors import ConfigError
    from obliviate.methods import build_method

    with pytest.raises(ConfigError, match="beta"):
        build_method("crisp", {"beta": 1.5})
    with pytest.raises(ConfigError, match="target_texts"):
        build_method("crisp", {"target_texts": ["a"]})
