"""ATWU: SATGA+ by hand, the alternating updates, the budget regulariser, the weighted objectives."""

import math

import pytest
import torch

import obliviate.unlearning.engine as unlearn_mod
from obliviate.methods import build_method
from obliviate.unlearning.objectives import npo_loss
from obliviate.methods._token_weights import (
    ScorerConfig,
    TokenScorer,
    binary_entropy,
    satga_plus_loss,
    w_objective,
)
from obliviate.methods.wga import wga_forget_loss
from obliviate.train import TrainConfig
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference

FORGET = [("Question: What is Morvexia treated with?\nAnswer:", " Morvexia is treated with zalpradine."),
          ("Question: What does Morvexia cause?\nAnswer:", " Morvexia causes cold skin.")]
RETAIN = [("Question: Where does the glimmerfin live?\nAnswer:", " The glimmerfin lives in cold caves."),
          ("Question: What does the glimmerfin eat?\nAnswer:", " The glimmerfin eats moss.")]

# Three tokens with p = 0.5, 0.25, 0.8 (CE = ln 2, ln 4, ln 1.25), plus one masked position.
P = torch.tensor([[0.5, 0.25, 0.8, 0.1]])
NLL = -torch.log(P)
MASK = torch.tensor([[True, True, True, False]])
Z = torch.tensor([[0.5, 1.0, 0.25, 0.9]])
L2, L4, L125 = math.log(2), math.log(4), math.log(1.25)

# beta = 2; s_t = z_t * p_t ** e(z_t); loss = -(1/3) sum_t s_t CE_t
HAND = {
    # e = 2(1 - z) = 1, 0, 1.5
    "beta_one_minus_z": -(0.5 * 0.5 ** 1 * L2 + 1.0 * 0.25 ** 0 * L4 + 0.25 * 0.8 ** 1.5 * L125) / 3,  # -0.533166
    # e = 2z = 1, 2, 0.5
    "beta_z": -(0.5 * 0.5 ** 1 * L2 + 1.0 * 0.25 ** 2 * L4 + 0.25 * 0.8 ** 0.5 * L125) / 3,  # -0.103275
    # e = 2
    "beta": -(0.5 * 0.5 ** 2 * L2 + 1.0 * 0.25 ** 2 * L4 + 0.25 * 0.8 ** 2 * L125) / 3,  # -0.069663
}
HAND_DECIMAL = {"beta_one_minus_z": -0.533166, "beta_z": -0.103275, "beta": -0.069663}


@pytest.mark.parametrize("exponent", list(HAND))
def test_satga_plus_hand_computed(exponent):
    nll = NLL.clone().requires_grad_(True)
    loss = satga_plus_loss(Z, nll, MASK, beta=2.0, exponent=exponent)
    assert loss.item() == pytest.approx(HAND[exponent], rel=1e-5)
    assert loss.item() == pytest.approx(HAND_DECIMAL[exponent], abs=1e-5)
    # theta-step gradient: p_t inside s_t is stop-gradient, so dL/dCE_t = -s_t / 3 (0 where masked)
    loss.backward()
    e = {"beta_one_minus_z": 2 * (1 - Z), "beta_z": 2 * Z, "beta": torch.full_like(Z, 2.0)}[exponent]
    s = Z * P ** e
    assert torch.allclose(nll.grad, -(s / 3) * MASK, atol=1e-6)


def test_satga_plus_with_unit_scores_and_constant_exponent_is_wga():
    ones = torch.ones_like(Z)
    for beta in (1.0, 2.0):
        ours = satga_plus_loss(ones, NLL, MASK, beta=beta, exponent="beta")
        assert ours.item() == pytest.approx(wga_forget_loss(NLL, MASK, beta).item(), rel=1e-6)
    # WGA, beta = 1, by hand: -mean p_t CE_t
    hand = -(0.5 * L2 + 0.25 * L4 + 0.8 * L125) / 3
    assert satga_plus_loss(ones, NLL, MASK, 1.0, "beta").item() == pytest.approx(hand, rel=1e-6)


def test_w_objective_terms_by_hand():
    cfg = ScorerConfig(sat_beta=2.0, exponent="beta", lam=1.0, tau=0.5, mu=10.0, rho=0.3)
    z = torch.tensor([[0.5, 0.5, 0.5, 0.9]])  # masked last position must not count
    t = w_objective(z, NLL, MASK, cfg)
    assert t["entropy"].item() == pytest.approx(0.5 * L2, rel=1e-5)  # H_b(0.5) = ln 2
    assert t["budget"].item() == pytest.approx(10 * (0.5 - 0.3) ** 2, rel=1e-5)
    assert t["satga"].item() == pytest.approx(-(0.5 * 0.25 * L2 + 0.5 * 0.0625 * L4 + 0.5 * 0.64 * L125) / 3, rel=1e-5)
    assert binary_entropy(torch.tensor([0.0, 1.0])).max().item() < 1e-4


@pytest.mark.parametrize("start", [0.05, 0.9])
def test_budget_pulls_mean_score_to_rho(start):
    """Only the budget term (lam = tau = 0): the mean score reaches rho from below and above."""
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(1, 40, 8, generator=g)
    nll = torch.rand(1, 40, generator=g)
    mask = torch.ones(1, 40, dtype=torch.bool)
    cfg = ScorerConfig(lam=0.0, tau=0.0, mu=10.0, rho=0.3, w_lr=0.05, w_steps=1)
    sc = TokenScorer(cfg)
    sc.init(8)
    with torch.no_grad():
        sc.w.copy_(0.3 * torch.randn(8, generator=g))
        sc.b.fill_(math.log(start / (1 - start)))
    m0 = sc.scores(feats).mean().item()
    assert abs(m0 - 0.3) > 0.2
    for _ in range(300):
        sc.w_step(feats, nll, mask)
    assert abs(sc.scores(feats).mean().item() - 0.3) < 0.02


def _batch(tokenizer):
    data = PairedData(tokenizer, FORGET, RETAIN, batch_size=2, seed=0)
    return data(0)


def test_scorer_starts_at_rho_and_is_not_a_model_parameter(tiny_model, tiny_tokenizer):
    method = build_method("atwu", {"rho": 0.2})
    batch = _batch(tiny_tokenizer)
    z = method.token_scores(tiny_model, batch["forget"])
    assert z.shape == (2, batch["forget"]["input_ids"].size(1) - 1)
    assert torch.allclose(z, torch.full_like(z, 0.2), atol=1e-6)  # w = 0, b = logit(rho)
    state = method.scorer_state()
    assert torch.equal(state["w"], torch.zeros(32))
    ids = {id(p) for p in tiny_model.parameters()}
    assert id(method.scorer.w) not in ids and id(method.scorer.b) not in ids


def test_one_loss_call_steps_w_only_and_theta_terms_do_not_reach_w(tiny_model, tiny_tokenizer):
    method = build_method("atwu")
    batch = _batch(tiny_tokenizer)
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    terms = method.loss(tiny_model, batch, None)
    # the w-step moved (w, b) ...
    state = method.scorer_state()
    assert state["w"].abs().max() > 0
    assert state["b"].item() != pytest.approx(math.log(0.3 / 0.7), abs=1e-7)
    # ... and left theta exactly as it was, with no gradient accumulated
    for n, p in tiny_model.named_parameters():
        assert torch.equal(p.detach(), before[n]), n
        assert p.grad is None or not p.grad.any(), n
    # theta-step terms carry no path to (w, b)
    assert set(terms) == {"forget", "retain"}
    sum(terms.values()).backward()
    assert method.scorer.w.grad is None and method.scorer.b.grad is None
    assert any(p.grad is not None and p.grad.any() for p in tiny_model.parameters())


def test_training_loop_never_moves_w_and_w_step_never_moves_theta(tiny_model, tiny_tokenizer, monkeypatch):
    """Through unlearn(): between loss() calls (the theta-step) w is unchanged; inside loss() theta is."""
    captured = {}
    real_build = unlearn_mod.build_method

    def build(name, overrides=None, prefix=None):
        method = real_build(name, overrides, prefix)
        captured["method"] = method
        real_loss = method.loss
        log = captured.setdefault("log", [])

        def loss(model, batch, ref):
            theta = {n: p.detach().clone() for n, p in model.named_parameters()}
            grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
            w_in = method.scorer_state()
            terms = real_loss(model, batch, ref)
            for n, p in model.named_parameters():
                assert torch.equal(p.detach(), theta[n]), f"w-step changed {n}"
                g = grads[n]
                assert (p.grad is None and g is None) or torch.equal(p.grad, g), f"w-step touched {n}.grad"
            log.append((w_in, method.scorer_state(), theta))
            return terms

        method.loss = loss
        return method

    monkeypatch.setattr(unlearn_mod, "build_method", build)
    cfg = UnlearnConfig(method="atwu", batch_size=2,
                        train=TrainConfig(steps=2, lr=1e-2, schedule="constant", progress=False, log_every=1))
    model, _ = unlearn(tiny_model, tiny_tokenizer, FORGET, RETAIN, cfg)
    (w_in0, w_out0, theta0), (w_in1, w_out1, theta1) = captured["log"]
    assert w_in0["w"] is None  # created on the first w-step
    assert not torch.equal(w_out1["w"], w_out0["w"])  # the second w-step moved w
    # the theta-step between the two loss() calls left (w, b) bit-identical ...
    assert torch.equal(w_in1["w"], w_out0["w"]) and torch.equal(w_in1["b"], w_out0["b"])
    # ... while it did move theta
    assert any(not torch.equal(theta1[n], theta0[n]) for n in theta0)
    final = captured["method"].scorer_state()
    assert torch.equal(final["w"], w_out1["w"])


def _one_loss(name, model, tokenizer, ref):
    method = build_method(name, {"w_steps": 0, "rho": 0.4})
    data = PairedData(tokenizer, FORGET, RETAIN, batch_size=2, seed=0, idk=["I don't know."])
    batch = data(0)
    return method.loss(model, batch, ref), batch


def test_weighted_objectives_with_constant_scores_reduce_to_their_base(tiny_model, tiny_tokenizer):
    """With w_steps = 0 the scores stay rho everywhere: the weighted losses become the plain ones."""
    from obliviate.losses import token_nll
    from obliviate.unlearning.objectives import simnpo_loss
    from obliviate.models.layers import input_embeddings

    ref = Reference(tiny_model, shared=False)
    with torch.no_grad():  # make the policy differ from the reference
        input_embeddings(tiny_model).weight.mul_(3)
    terms, batch = _one_loss("atwu_ga", tiny_model, tiny_tokenizer, ref)
    f = batch["forget"]
    nll, mask = token_nll(tiny_model(input_ids=f["input_ids"], attention_mask=f["attention_mask"]).logits, f["labels"])
    assert terms["forget"].item() == pytest.approx(-(nll.sum() / mask.sum()).item(), rel=1e-5)
    assert "retain" not in terms  # alpha = 0: GradAscent

    terms, _ = _one_loss("atwu_simnpo", tiny_model, tiny_tokenizer, ref)
    nll_bar = nll.sum(-1) / mask.sum(-1)
    assert terms["forget"].item() == pytest.approx(0.125 * simnpo_loss(nll_bar, 4.5, 0.0).item(), rel=1e-5)

    # NPO: sum_t 0.4 log p_t = 0.4 log pi, on the policy and the reference alike
    terms, _ = _one_loss("atwu_npo", tiny_model, tiny_tokenizer, ref)
    nll_ref, _ = token_nll(ref.logits(f), f["labels"])
    margin = (nll_ref.sum(-1) - nll.sum(-1)).abs()
    assert margin.min() > 0.1  # the weights matter: unweighted NPO would differ
    expect = npo_loss(-0.4 * nll.sum(-1), -0.4 * nll_ref.sum(-1), 0.1)
    assert terms["forget"].item() == pytest.approx(expect.item(), rel=1e-5)
    assert terms["forget"].item() != pytest.approx(npo_loss(-nll.sum(-1), -nll_ref.sum(-1), 0.1).item(), rel=1e-3)

    terms, _ = _one_loss("atwu_idkdpo", tiny_model, tiny_tokenizer, ref)
    assert set(terms) == {"forget", "retain"} and torch.isfinite(terms["forget"])


def test_bad_scorer_config_names_the_key():
    from obliviate.errors import ConfigError

    with pytest.raises(ConfigError, match="exponent"):
        build_method("atwu", {"exponent": "nope"})
    with pytest.raises(ConfigError, match="rho"):
        build_method("atwu_npo", {"rho": 1.5})
