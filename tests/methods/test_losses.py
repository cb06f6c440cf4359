"""Loss maths against hand-computed values: float32 expressions of a few operations (no long sums) against float64
hand values, so ``rel_tol=1e-6`` is about eight float32 ulps (measured: one ulp on AVX2 kernels, issue #56)."""

import math

import pytest
import torch
import torch.nn.functional as F

from _reference import FORGET, RETAIN, paired_batch
from obliviate.losses import hidden_mse, kl_to_reference, masked_mean, soft_cross_entropy, token_nll
from obliviate.unlearning.objectives import dpo_loss, npo_loss, sequence_logprob, simnpo_loss, token_logprobs
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import reference_logprobs, reference_token_logprobs
from obliviate.methods.ce_u import ceu_loss
from obliviate.methods.cosine_rmu import cosine_distance
from obliviate.methods.jensun import jsd, jsd_to_onehot
from obliviate.methods.pdu import margin_flattening_loss
from obliviate.methods.repnoise import mmd_gaussian
from obliviate.methods.rmu import mean_token_norm
from obliviate.methods.undial import undial_loss
from obliviate.methods.undo import distill_kl
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


# Every loss or score the package computes from a model's logits (B, T, V) / (N, V), log-probabilities or hidden
# states (B, T, d), on inputs z, labels y (B, T), targets t (N,) and states h.
LOSSES = {
    "token_nll": lambda z, y, t, h: token_nll(z, y)[0],
    "kl_to_reference": lambda z, y, t, h: kl_to_reference(z, z.flip(0), y),
    "soft_cross_entropy": lambda z, y, t, h: soft_cross_entropy(F.softmax(z[0], -1), z[1]),
    "hidden_mse": lambda z, y, t, h: hidden_mse(h, h.flip(0)),
    "ceu_loss": lambda z, y, t, h: ceu_loss(z[0], t),
    "margin_flattening_loss": lambda z, y, t, h: margin_flattening_loss(z[0]),
    "distill_kl": lambda z, y, t, h: distill_kl(z, z.flip(0), torch.ones(y.shape)),
    "jsd_to_onehot": lambda z, y, t, h: jsd_to_onehot(F.log_softmax(z[0], -1)[:, 0]),
    "jsd": lambda z, y, t, h: jsd(z[0], z[1]),
    "undial_loss": lambda z, y, t, h: undial_loss(z[0], z[1], t, 1.0),
    "mean_token_norm": lambda z, y, t, h: mean_token_norm(h, None),
    "cosine_distance": lambda z, y, t, h: cosine_distance(h, h.flip(0), None),
    "mmd_gaussian": lambda z, y, t, h: mmd_gaussian(h[0], h[1]),
}


@pytest.mark.parametrize("dtype, computed_in", [(torch.float64, torch.float64), (torch.float32, torch.float32),
                                                (torch.bfloat16, torch.float32), (torch.float16, torch.float32)])
@pytest.mark.parametrize("name", LOSSES)
def test_losses_are_computed_in_float32_at_least_and_never_round_float64_down(name, dtype, computed_in):
    g = torch.Generator().manual_seed(0)
    z, h = torch.randn(2, 5, 7, generator=g).to(dtype), torch.randn(2, 5, 4, generator=g).to(dtype)
    y, t = torch.randint(0, 7, (2, 5), generator=g), torch.randint(0, 7, (5,), generator=g)
    assert LOSSES[name](z, y, t, h).dtype == computed_in


def test_a_float64_models_answer_logprobs_and_their_cache_are_float64(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)["forget"]
    assert sequence_logprob(double_model, batch).dtype == token_logprobs(double_model, batch).dtype == torch.float64
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    cache = {**reference_logprobs(double_model, data, ["forget"]), **reference_token_logprobs(double_model, data,
                                                                                               ["forget"])}
    assert {k: v.dtype for k, v in cache.items()} == {"forget": torch.float64, "forget/tokens": torch.float64}
    live = sequence_logprob(double_model, data(0)["forget"])
    # the same rows in other batches (other padding): float64 rounding, 1e-16 relative, of sums of log-probabilities
    torch.testing.assert_close(cache["forget"][data(0)["forget"]["index"]], live, rtol=0, atol=1e-12)
