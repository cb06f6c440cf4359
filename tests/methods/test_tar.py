"""TAR against its algorithm (Tamirisa et al. 2024): one outer step's gradient, by hand: K AdamW steps of the attack
(the update rule written out), the negative entropy's gradient on forget at each adapted point, weighted
lambda_TR / K, plus the retain NLL's gradient at theta; and runs through the engine."""

import copy

import pytest
import torch

from _reference import grads, neg_entropy, paired_batch, retain_nll, run_on_random_arch, run_tiny
from obliviate.methods import build_method


def adamw_attack(model, loss_fn, lr, steps, wd=0.01, b1=0.9, b2=0.999, eps=1e-8):
    """Yield ``model`` after each of ``steps`` AdamW steps on ``loss_fn`` (decoupled weight decay, bias-corrected)."""
    m = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    v = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    for t in range(1, steps + 1):
        g = grads(model, loss_fn(model))
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.mul_(1 - lr * wd)
                m[n] = b1 * m[n] + (1 - b1) * g[n]
                v[n] = b2 * v[n] + (1 - b2) * g[n] ** 2
                p.sub_(lr * (m[n] / (1 - b1 ** t)) / ((v[n] / (1 - b2 ** t)).sqrt() + eps))
        yield model


@pytest.mark.parametrize("data", ["forget", "retain"])
def test_one_outer_step_matches_the_algorithm(double_model, tiny_tokenizer, data):
    lam, alpha, K, lr = 4.0, 1.3, 3, 0.01
    batch = paired_batch(tiny_tokenizer)
    before = {n: p.detach().clone() for n, p in double_model.named_parameters()}
    method = build_method("tar", {"lam_tr": lam, "alpha": alpha, "inner_steps": K, "attacks": 1,
                                  "attack_lrs": [lr], "forget_attack_share": 1.0 if data == "forget" else 0.0})
    assert method.sample_attacks(0) == [(lr, data)]
    terms = method.loss(double_model, batch, None)
    for n, p in double_model.named_parameters():  # the attack is undone
        assert torch.equal(p.detach(), before[n]), n
    got = grads(double_model, sum(terms.values()))

    attacked = copy.deepcopy(double_model)
    expected = {n: alpha * g for n, g in grads(double_model, retain_nll(double_model, batch["retain"])).items()}
    value = 0.0
    for adapted in adamw_attack(attacked, lambda m: retain_nll(m, batch[data]), lr, K):
        tr = neg_entropy(adapted, batch["forget"])
        value += lam / K * float(tr.detach())
        for n, g in grads(adapted, tr).items():
            expected[n] = expected[n] + lam / K * g
    assert float(terms["tamper"].detach()) == pytest.approx(value, abs=1e-5)
    for n in got:
        torch.testing.assert_close(got[n], expected[n], atol=1e-5, rtol=1e-5)


def test_attacks_are_sampled_from_the_stated_distribution():
    method = build_method("tar", {"attacks": 3, "attack_lrs": [1e-4, 1e-3], "forget_attack_share": 0.65})
    draws = [a for step in range(400) for a in method.sample_attacks(step)]
    assert {lr for lr, _ in draws} == {1e-4, 1e-3}
    share = sum(d == "forget" for _, d in draws) / len(draws)
    assert 0.6 < share < 0.7  # 1200 draws: 0.65 +- 0.014 (one standard error), within 3.5 of them
    assert method.sample_attacks(7) == method.sample_attacks(7)  # a function of the step: a resumed run repeats it


def test_runs_on_the_world_base_model(world_base, fresh):
    run_tiny("tar", world_base, fresh, train={"steps": 5})


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_runs_on_a_random_init_model_of_a_real_architecture(tiny_tokenizer, arch):
    run_on_random_arch("tar", tiny_tokenizer, arch, steps=2)
