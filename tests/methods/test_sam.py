"""SAM unlearning against its equation (Fan et al. 2025): one outer step's gradient, taken by hand: delta = rho g/||g||
from the forget loss's gradient at theta, the forget gradient at theta + delta, the retain gradient at theta; and
runs through the engine."""

import copy

import pytest
import torch
import torch.nn.functional as F

from _reference import grads, paired_batch, retain_nll, rows, run_on_random_arch, run_tiny, seq_logprob
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference


def npo_forget(model, frozen, batch, beta):
    terms = []
    for ids, targets in rows(batch):
        with torch.no_grad():
            ref = seq_logprob(frozen, ids, targets)
        terms.append(F.logsigmoid(-beta * (seq_logprob(model, ids, targets) - ref)))
    return -(2 / beta) * sum(terms) / len(terms)


@pytest.mark.parametrize("name", ["sam_npo", "sam_graddiff"])
def test_one_outer_step_matches_the_equation(double_model, tiny_tokenizer, name):
    rho, gamma, alpha, beta = 0.05, 0.7, 1.3, 0.1
    frozen = copy.deepcopy(double_model).eval()
    with torch.no_grad():  # NPO's ratio is away from 0
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer)
    forget = (lambda m: npo_forget(m, frozen, batch["forget"], beta)) if name == "sam_npo" else \
        (lambda m: -retain_nll(m, batch["forget"]))
    before = {n: p.detach().clone() for n, p in double_model.named_parameters()}

    params = {"rho": rho, "gamma": gamma, "alpha": alpha, **({"beta": beta} if name == "sam_npo" else {})}
    method = build_method(name, params)
    terms = method.loss(double_model, batch, Reference(frozen, shared=False))
    for n, p in double_model.named_parameters():  # the perturbation is undone
        assert torch.equal(p.detach(), before[n]), n
    got = grads(double_model, sum(terms.values()))

    g = grads(double_model, forget(double_model))
    norm = torch.sqrt(sum((x ** 2).sum() for x in g.values()))
    perturbed = copy.deepcopy(double_model)
    with torch.no_grad():
        for n, p in perturbed.named_parameters():
            p.add_(rho * g[n] / norm)
    adv = forget(perturbed)
    g_adv = grads(perturbed, adv)
    g_ret = grads(double_model, retain_nll(double_model, batch["retain"]))
    expected = gamma * adv + alpha * retain_nll(double_model, batch["retain"])
    assert float(sum(terms.values()).detach()) == pytest.approx(float(expected.detach()), abs=1e-5)
    for n in got:
        torch.testing.assert_close(got[n], gamma * g_adv[n] + alpha * g_ret[n], atol=1e-5, rtol=1e-5)
    assert any(float((got[n] - gamma * g[n] - alpha * g_ret[n]).abs().max()) > 1e-6 for n in got)  # not plain


@pytest.mark.parametrize("name", ["sam_npo", "sam_graddiff"])
def test_runs_on_the_world_base_model(world_base, fresh, name):
    before, after, _ = run_tiny(name, world_base, fresh)
    assert after > before  # the forget answers lost probability


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_runs_on_a_random_init_model_of_a_real_architecture(tiny_tokenizer, arch):
    run_on_random_arch("sam_npo", tiny_tokenizer, arch)
