"""UNDO against its three stages (Lee et al. 2025): the unlearning loss (GradDiff / NPO), the noise
theta_s = (1 - alpha) theta_u + alpha beta eps with Xavier-uniform eps written out, and the distillation loss
KL(p_teacher || p_student) per example over every real position; and runs through the engine."""

import copy

import pytest
import torch
import torch.nn.functional as F

from _reference import assert_same, logits_of, paired_batch, retain_nll, rows, run_on_random_arch, run_tiny
from obliviate.errors import ConfigError
from obliviate.methods import build_method


def xavier_noise(model, seed):
    """eps of each parameter in order: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) for matrices, 0 for vectors."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n, p in model.named_parameters():
        if p.dim() >= 2:
            a = (6.0 / (p.shape[0] + p[0].numel())) ** 0.5
            out[n] = (torch.rand(p.shape, generator=g, dtype=torch.float32) * 2 - 1).double() * a
        else:
            out[n] = torch.zeros_like(p)
    return out


def distill_reference(student, teacher, batch):
    """mean over every position followed by a real token of sum_v q(v) (log q(v) - log p(v))."""
    total, n = 0.0, 0
    for ids, _ in rows(batch):
        logp = F.log_softmax(logits_of(student, ids), -1)
        with torch.no_grad():
            logq = F.log_softmax(logits_of(teacher, ids), -1)
        for t in range(ids.shape[1] - 1):
            total, n = total + (logq[t].exp() * (logq[t] - logp[t])).sum(), n + 1
    return total / n


def test_the_three_stages_match_the_equations(double_model, tiny_tokenizer):
    alpha, beta, seed, gamma, base_alpha = 0.3, 0.1, 4, 0.7, 1.3
    batch = paired_batch(tiny_tokenizer)
    method = build_method("undo", {"alpha": alpha, "beta": beta, "seed": seed, "gamma": gamma,
                                   "base_alpha": base_alpha, "distill_frac": 0.5})
    method.on_data({"forget": 3, "retain": 3, "steps_per_epoch": 1, "steps": 2})  # 1 step unlearns, 1 distils

    loss = sum(method.loss(double_model, batch, None).values())  # stage 1: GradDiff
    expected = gamma * -retain_nll(double_model, batch["forget"]) + base_alpha * retain_nll(double_model,
                                                                                            batch["retain"])
    assert_same(loss, double_model, expected)

    teacher = copy.deepcopy(double_model)
    eps = xavier_noise(double_model, seed)
    terms = method.loss(double_model, batch, None)  # stage 2 (noise) and 3 (distil)
    for n, p in double_model.named_parameters():
        want = (1 - alpha) * dict(teacher.named_parameters())[n] + alpha * beta * eps[n]
        # the method rounds eps = u * a to float32 (here it is float64): at most a * 2^-24 apart, a <= 0.31 here,
        # times alpha * beta = 0.03: <= 6e-10
        torch.testing.assert_close(p.detach(), want.detach(), atol=1e-8, rtol=0)
    assert list(terms) == ["distill"]
    assert_same(terms["distill"], double_model, distill_reference(double_model, teacher, batch["retain"]))
    assert set(method.scorer_state()) == {"calls", "teacher"}  # a checkpoint keeps the teacher


def test_npo_base_reads_the_reference(tiny_tokenizer):
    assert build_method("undo", {"base": "npo"}).needs_reference
    assert not build_method("undo").needs_reference


def test_one_step_is_refused():
    with pytest.raises(ConfigError, match="at least 2 steps"):
        build_method("undo").on_data({"forget": 3, "retain": 3, "steps_per_epoch": 1, "steps": 1})


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, summary = run_tiny("undo", world_base, fresh)
    names = {k for r in summary["history"] for k in r}
    assert {"forget", "distill"} <= names  # both stages ran
    assert after > before


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_runs_on_a_random_init_model_of_a_real_architecture(tiny_tokenizer, arch):
    run_on_random_arch("undo", tiny_tokenizer, arch, base="npo")
