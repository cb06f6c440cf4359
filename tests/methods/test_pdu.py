"""PDU against its equations (Entesari et al. 2025) written out per example, its dual ascent step by step, and
tiny runs through the engine.

open-unlearning compared: src/trainer/unlearn/pdu.py (file version 17e8e73): the loss gamma * L_f +
lambda * (L_r - eps), then lambda <- max(0, lambda + dual_step_size * (L_r - eps)) per step once the warm-up
epochs are over; its forget loss averages (max - mean)^2 over every position, here over answer tokens.
"""

import copy

import pytest
import torch

from _reference import assert_same, logits_of, paired_batch, retain_kl, retain_nll, rows, run_tiny
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference


def flattening_reference(model, batch):
    """mean over answer tokens of (max_v z_v - (1/V) sum_v z_v)^2."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        z = logits_of(model, ids)
        for t, _ in targets:
            total, n = total + (z[t].max() - z[t].sum() / z.shape[-1]) ** 2, n + 1
    return total / n


@pytest.mark.parametrize("retain", ["nll", "kl"])
def test_lagrangian_and_gradient_match_the_equation(double_model, tiny_tokenizer, retain):
    ref_model = copy.deepcopy(double_model).eval()
    with torch.no_grad():
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer)
    method = build_method("pdu", {"retain_loss_eps": 0.25, "gamma": 0.9, "alpha": 1.7, "retain": retain,
                                  "dual_warmup_epochs": 0})
    loss = sum(method.loss(double_model, batch, Reference(ref_model, shared=False)).values())
    l_r = retain_nll(double_model, batch["retain"]) if retain == "nll" else \
        retain_kl(double_model, ref_model, batch["retain"])
    assert_same(loss, double_model, 0.9 * flattening_reference(double_model, batch["forget"]) + 1.7 * (l_r - 0.25))
    # one dual ascent step
    assert method.lam == pytest.approx(max(0.0, 1.7 + 1.0 * (float(l_r.detach()) - 0.25)), abs=1e-6)


def test_dual_variable_waits_for_the_warm_up_and_stays_nonnegative(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    method = build_method("pdu", {"retain_loss_eps": 100.0, "alpha": 0.5, "dual_step_size": 0.01,
                                  "dual_warmup_epochs": 2})
    method.on_data({"forget": 3, "retain": 3, "steps_per_epoch": 1})  # warm-up: 2 steps
    lams = []
    for _ in range(4):
        method.loss(double_model, batch, None)
        lams.append(method.lam)
    assert lams[:2] == [0.5, 0.5]
    l_r = float(retain_nll(double_model, batch["retain"]).detach())
    assert lams[2] == pytest.approx(max(0.0, 0.5 + 0.01 * (l_r - 100)))
    assert lams[2] == 0.0 and lams[3] == 0.0  # retain loss far under eps: lambda clipped at 0


def test_eps_defaults_to_the_first_retain_loss_and_resumes(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    method = build_method("pdu", {"dual_warmup_epochs": 0})
    terms = method.loss(double_model, batch, None)
    assert method.eps == pytest.approx(float(retain_nll(double_model, batch["retain"]).detach()), rel=1e-6)
    assert abs(float(terms["retain"])) < 1e-6 and method.lam == pytest.approx(1.0, abs=1e-6)
    again = build_method("pdu", {"dual_warmup_epochs": 0})
    again.load_scorer_state(method.scorer_state())
    assert (again.lam, again.eps, again.step) == (method.lam, method.eps, 1)


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("pdu", world_base, fresh)
    assert after > before


def test_runs_on_a_user_qa_file(taught, fresh):
    before, after, _ = run_tiny("pdu", taught, fresh)
    assert after > before
