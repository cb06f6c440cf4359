"""Loss maths against hand-computed values."""

import math

import torch

from obliviate.losses import hidden_mse, masked_mean, token_nll
from obliviate.unlearning.objectives import dpo_loss, npo_loss, simnpo_loss
from obliviate.methods.rmu import mean_token_norm
from obliviate.methods.wga import wga_forget_loss


def logsig(x):
    return -math.log(1 + math.exp(-x))


def test_npo_hand_computed():
    logp = torch.tensor([-2.0, -1.0])
    ref = torch.tensor([-1.0, -1.0])
    # -(2/0.1) * mean(log sig(-0.1 * -1), log sig(0))
    expected = -20 * (logsig(0.1) + math.log(0.5)) / 2
    assert math.isclose(npo_loss(logp, ref, 0.1).item(), expected, rel_tol=1e-6)
    assert math.isclose(expected, 13.37544, rel_tol=1e-5)


def test_simnpo_hand_computed():
    nll_bar = torch.tensor([1.0, 3.0])
    expected = -(2 / 4.5) * (logsig(4.5) + logsig(13.5)) / 2
    assert math.isclose(simnpo_loss(nll_bar, 4.5, 0.0).item(), expected, rel_tol=1e-6)
    # delta shifts the margin: beta * (1 - 1) = 0 -> log 0.5
    assert math.isclose(simnpo_loss(torch.tensor([1.0]), 2.0, 1.0).item(), -(2 / 2) * math.log(0.5), rel_tol=1e-6)


def test_idk_dpo_hand_computed():
    w, w_ref = torch.tensor([-1.0]), torch.tensor([-3.0])
    l, l_ref = torch.tensor([-2.0]), torch.tensor([-1.0])
    # margin = (−1+3) − (−2+1) = 3 ; -(2/0.1) log sig(0.3)
    assert math.isclose(dpo_loss(w, w_ref, l, l_ref, 0.1).item(), -20 * logsig(0.3), rel_tol=1e-6)


def test_wga_hand_computed():
    nll = torch.tensor([[math.log(2), math.log(4), 5.0]])
    mask = torch.tensor([[True, True, False]])
    # p = 0.5, 0.25: -(0.5 ln2 + 0.25 ln4) / 2
    expected = -(0.5 * math.log(2) + 0.25 * math.log(4)) / 2
    assert math.isclose(wga_forget_loss(nll, mask, 1.0).item(), expected, rel_tol=1e-6)
    # SatImp with beta=1, beta2=1: weights p(1-p) = 0.25, 0.1875
    expected2 = -(0.25 * math.log(2) + 0.1875 * math.log(4)) / 2
    assert math.isclose(wga_forget_loss(nll, mask, 1.0, 1.0).item(), expected2, rel_tol=1e-6)


def test_wga_weights_are_detached():
    nll = torch.tensor([[1.0, 2.0]], requires_grad=True)
    wga_forget_loss(nll, torch.ones(1, 2, dtype=torch.bool), 1.0).backward()
    # d/dnll of -mean(sg(p) * nll) = -p/2
    assert torch.allclose(nll.grad, -torch.exp(-torch.tensor([[1.0, 2.0]])) / 2)


def test_rmu_forget_loss_masks_padding():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    target = torch.tensor([1.0, 1.0]).expand_as(h)
    # first token: ((0)^2 + (1)^2)/2 = 0.5 ; second token masked
    assert math.isclose(hidden_mse(h, target, torch.tensor([[1, 0]])).item(), 0.5)
    # unmasked: (0.5 + (4 + 9)/2) / 2 = 3.5
    assert math.isclose(hidden_mse(h, target, None).item(), 3.5)


def test_adaptive_rmu_coefficient_norm():
    h = torch.tensor([[[3.0, 4.0], [6.0, 8.0]]])
    assert math.isclose(mean_token_norm(h, torch.tensor([[1, 0]])).item(), 5.0)
    assert math.isclose(mean_token_norm(h, None).item(), 7.5)


def test_token_nll_and_masked_mean():
    # vocabulary of 2, uniform logits -> nll = ln 2 at each labelled position
    logits = torch.zeros(1, 3, 2)
    labels = torch.tensor([[-100, 1, -100]])
    nll, mask = token_nll(logits, labels)
    assert mask.tolist() == [[True, False]]
    assert math.isclose(masked_mean(nll, mask).item(), math.log(2), rel_tol=1e-6)
