"""RepNoise against its equation (Rosati et al. 2024): retain NLL - alpha * forget NLL + beta * sum over layers of the
Gaussian-kernel MMD between the forget hidden states and N(0, I) samples, the MMD written pair by pair; and runs
through the engine."""

import pytest
import torch

from _reference import assert_same, paired_batch, retain_nll, run_on_random_arch, run_tiny
from obliviate.methods import build_method
from obliviate.models.layers import decoder_layers


def mmd(xs, ys, kernels=5, mul=2.0):
    """Biased MMD^2 of the sample lists ``xs`` and ``ys`` with k(a, b) = sum_i exp(-||a - b||^2 / (s mul^(i - 2))),
    s the mean squared distance over the n^2 - n distinct pairs of all 2B samples (no gradient through s)."""
    every = xs + ys
    n = len(every)
    d2 = [[((a - b) ** 2).sum() for b in every] for a in every]
    s = (sum(float(d2[i][j].detach()) for i in range(n) for j in range(n) if i != j) / (n * n - n)
         / mul ** (kernels // 2))
    k = lambda i, j: sum(torch.exp(-d2[i][j] / (s * mul ** q)) for q in range(kernels))
    b = len(xs)
    mean = lambda I, J: sum(k(i, j) for i in I for j in J) / (len(I) * len(J))
    X, Y = range(b), range(b, n)
    return mean(X, X) + mean(Y, Y) - mean(X, Y) - mean(Y, X)


def layer_states(model, batch):
    """Each decoder layer's output on the (padded) forget batch, by forward hooks."""
    out, handles = {}, []
    for l, layer in enumerate(decoder_layers(model)):
        handles.append(layer.register_forward_hook(
            lambda _m, _a, o, l=l: out.__setitem__(l, o[0] if isinstance(o, tuple) else o)))
    try:
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    finally:
        for h in handles:
            h.remove()
    return out


@pytest.mark.parametrize("ascent", ["nll", "log"])
def test_loss_and_gradient_match_the_equation(double_model, tiny_tokenizer, ascent):
    alpha, beta, seed = 0.7, 0.3, 5
    batch = paired_batch(tiny_tokenizer)
    method = build_method("repnoise", {"alpha": alpha, "beta": beta, "seed": seed, "ascent": ascent})
    loss = sum(method.loss(double_model, batch, None).values())

    f = batch["forget"]
    states = layer_states(double_model, f)
    g = torch.Generator().manual_seed(seed)  # step 0 draws from seed + 0, layer by layer
    keep = f["attention_mask"].unsqueeze(-1).double()
    noise_term = 0.0
    for l in sorted(states):
        h = states[l] * keep
        z = torch.randn(h.shape, generator=g, dtype=torch.float32).double() * keep
        noise_term = noise_term + mmd([h[i].flatten() for i in range(len(h))], [z[i].flatten() for i in range(len(z))])
    nll_f = retain_nll(double_model, f)
    ascent_term = nll_f if ascent == "nll" else torch.log(1 + nll_f)
    expected = retain_nll(double_model, batch["retain"]) - alpha * ascent_term + beta * noise_term
    assert_same(loss, double_model, expected)


def test_the_noise_changes_with_the_step(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    method = build_method("repnoise", {"alpha": 0.0})
    a, b = (float(method.loss(double_model, batch, None)["noise"].detach()) for _ in range(2))
    assert a != b and method.scorer_state() == {"calls": 2}


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("repnoise", world_base, fresh)
    assert after > before


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_runs_on_a_random_init_model_of_a_real_architecture(tiny_tokenizer, arch):
    run_on_random_arch("repnoise", tiny_tokenizer, arch)
