"""JensUn against its equation (JSD to a one-hot refusal on forget, JSD to the frozen model on retain), written out
per example over whole distributions, and runs through the engine."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from _reference import assert_same, logits_of, paired_batch, rows, run_on_random_arch, run_tiny
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference

IDK = ["I don't know."]


def jsd(p, q):
    """1/2 KL(p || m) + 1/2 KL(q || m), m = (p + q) / 2, with 0 log 0 = 0."""
    m = (p + q) / 2
    kl = lambda a: sum(a[v] * torch.log(a[v] / m[v]) for v in range(len(a)) if a[v] > 0)
    return 0.5 * kl(p) + 0.5 * kl(q)


def forget_reference(model, batch):
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        p = F.softmax(logits_of(model, ids), -1)
        for t, y in targets:
            onehot = torch.zeros_like(p[t])
            onehot[y] = 1.0
            total, n = total + jsd(p[t], onehot), n + 1
    return total / n


def retain_reference(model, frozen, batch):
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        p = F.softmax(logits_of(model, ids), -1)
        with torch.no_grad():
            q = F.softmax(logits_of(frozen, ids), -1)
        for t, _ in targets:
            total, n = total + jsd(p[t], q[t]), n + 1
    return total / n


def test_loss_and_gradient_match_the_equation(double_model, tiny_tokenizer):
    frozen = copy.deepcopy(double_model).eval()
    with torch.no_grad():  # move away from the frozen model, so that the retain JSD is not zero
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer, idk=IDK)
    method = build_method("jensun", {"gamma": 0.7, "alpha": 1.3})
    loss = sum(method.loss(double_model, batch, Reference(frozen, shared=False)).values())
    expected = 0.7 * forget_reference(double_model, batch["idk"]) + 1.3 * retain_reference(double_model, frozen,
                                                                                            batch["retain"])
    assert_same(loss, double_model, expected)


def test_the_forget_term_is_bounded_by_log_2(double_model, tiny_tokenizer):
    """JSD <= log 2, reached when the refusal token has probability 0; 0 when it has probability 1."""
    from obliviate.methods.jensun import jsd_to_onehot

    assert float(jsd_to_onehot(torch.tensor([-1e4]))) == pytest.approx(math.log(2))
    assert float(jsd_to_onehot(torch.tensor([0.0]))) == pytest.approx(0.0, abs=1e-12)


def test_runs_on_the_world_base_model(world_base, fresh):
    _, _, summary = run_tiny("jensun", world_base, fresh)
    assert summary["reference"] != "copy"  # the retain logits are cached, no frozen copy held


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_runs_on_a_random_init_model_of_a_real_architecture(tiny_tokenizer, arch):
    run_on_random_arch("jensun", tiny_tokenizer, arch)
