"""SatImp against its equation (Yang et al. 2025) written out per token, and tiny runs through the engine.

open-unlearning compared: ``compute_satimp_loss`` (src/trainer/utils.py, file version 19a6141) and
src/trainer/unlearn/satimp.py (0ad76a2): -mean over labelled tokens of p^beta1 (1 - p)^beta2 CE with the weights
detached, the same as here.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from _reference import assert_same, logits_of, paired_batch, retain_kl, retain_nll, rows, run_tiny
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference


def satimp_reference(model, batch, beta1, beta2):
    """-mean over answer tokens of w * CE, w = p^beta1 (1 - p)^beta2 held constant (a number, not a tensor)."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        logp = F.log_softmax(logits_of(model, ids), -1)
        for t, y in targets:
            p = float(logp[t, y].detach().exp())
            total, n = total - p ** beta1 * (1 - p) ** beta2 * (-logp[t, y]), n + 1
    return total / n


@pytest.mark.parametrize("beta1,beta2,retain", [(5.0, 1.0, "nll"), (1.0, 0.0, "kl"), (0.5, 2.0, "nll")])
def test_loss_and_gradient_match_the_equation(double_model, tiny_tokenizer, beta1, beta2, retain):
    ref_model = copy.deepcopy(double_model).eval()
    with torch.no_grad():
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer)
    method = build_method("satimp", {"beta1": beta1, "beta2": beta2, "gamma": 0.3, "alpha": 2.0, "retain": retain})
    loss = sum(method.loss(double_model, batch, Reference(ref_model, shared=False)).values())
    retain_term = retain_nll(double_model, batch["retain"]) if retain == "nll" else \
        retain_kl(double_model, ref_model, batch["retain"])
    expected = 0.3 * satimp_reference(double_model, batch["forget"], beta1, beta2) + 2.0 * retain_term
    assert_same(loss, double_model, expected)


def test_open_unlearning_defaults():
    cfg = build_method("satimp").cfg
    assert (cfg.beta1, cfg.beta2, cfg.gamma, cfg.alpha, cfg.retain) == (5.0, 1.0, 0.1, 1.0, "nll")  # SatImp.yaml


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("satimp", world_base, fresh)
    assert after > before


def test_runs_on_a_user_qa_file(taught, fresh):
    before, after, _ = run_tiny("satimp", taught, fresh)
    assert after > before
