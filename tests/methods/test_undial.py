"""UNDIAL against its equation (Dong et al. 2024) written out per example, and a tiny run through the engine.

open-unlearning compared: ``compute_undial_loss`` (src/trainer/utils.py, file version 19a6141) and
src/trainer/unlearn/undial.py (5a7dfb4): the same adjusted-teacher cross-entropy, but averaged there over every
position of the sequence; here (and in the paper) over the answer tokens only.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from _reference import assert_same, logits_of, paired_batch, retain_kl, retain_nll, rows, run_tiny
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference


def undial_reference(model, teacher, batch, beta):
    """mean over answer tokens of -sum_v q(v) log p_theta(v), q = softmax(z_teacher - beta * onehot(y))."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        logp = F.log_softmax(logits_of(model, ids), -1)
        with torch.no_grad():
            z = logits_of(teacher, ids)
        for t, y in targets:
            adjusted = z[t].clone()
            adjusted[y] = adjusted[y] - beta
            q = F.softmax(adjusted, -1)
            total, n = total - (q * logp[t]).sum(), n + 1
    return total / n


@pytest.mark.parametrize("retain", ["nll", "kl"])
def test_loss_and_gradient_match_the_equation(double_model, tiny_tokenizer, retain):
    teacher = copy.deepcopy(double_model).eval()
    with torch.no_grad():  # the student moves away from the teacher, so that the KL term is not zero
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer)
    method = build_method("undial", {"beta": 3.0, "gamma": 0.7, "alpha": 1.3, "retain": retain})
    ref = Reference(teacher, shared=False)
    loss = sum(method.loss(double_model, batch, ref).values())
    retain_term = retain_nll(double_model, batch["retain"]) if retain == "nll" else \
        retain_kl(double_model, teacher, batch["retain"])
    expected = 0.7 * undial_reference(double_model, teacher, batch["forget"], 3.0) + 1.3 * retain_term
    assert_same(loss, double_model, expected)


def test_beta_zero_is_plain_distillation_to_the_teacher(double_model, tiny_tokenizer):
    """With beta = 0 the target is the teacher itself: on the teacher, the loss is the teacher's entropy and its
    gradient vanishes (the cross-entropy's minimum), up to the float32 rounding of the method's softmax."""
    batch = paired_batch(tiny_tokenizer)
    method = build_method("undial", {"beta": 0.0})
    loss = method.loss(double_model, batch, Reference(double_model, shared=False))["forget"]
    g = torch.autograd.grad(loss, [p for p in double_model.parameters()], allow_unused=True)
    assert max(float(x.abs().max()) for x in g if x is not None) < 1e-6


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("undial", world_base, fresh)
    assert after > before  # the forget answers lost probability


def test_runs_on_a_user_qa_file(taught, fresh):
    before, after, _ = run_tiny("undial", taught, fresh)
    assert after > before
