"""CE-U against its equation (Yang 2025) written out per example, and tiny runs through the engine.

open-unlearning compared: ``cross_entropy_unlearning_loss`` / ``compute_batch_ceu`` in
src/trainer/unlearn/ceu.py (file version 2231e31): the same target (the model's own detached logits with the
answer token at -inf) and the same mask of the first n answer tokens.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from _reference import assert_same, grads, logits_of, paired_batch, retain_kl, retain_nll, rows, run_tiny
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference


def ceu_reference(model, batch, n_skip):
    """mean over answer tokens after each answer's first n_skip of -sum_{v != y} q(v) log p_theta(v),
    q(v) = exp(z_v) / sum_{u != y} exp(z_u) with z detached."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        z = logits_of(model, ids)
        logp = F.log_softmax(z, -1)
        for t, y in targets[n_skip:]:
            zt = z[t].detach()
            others = [v for v in range(zt.shape[0]) if v != y]
            q = torch.exp(zt[others]) / torch.exp(zt[others]).sum()
            total, n = total - (q * logp[t, others]).sum(), n + 1
    return total / n


@pytest.mark.parametrize("n_skip,retain", [(1, "nll"), (0, "kl"), (3, "nll")])
def test_loss_and_gradient_match_the_equation(double_model, tiny_tokenizer, n_skip, retain):
    ref_model = copy.deepcopy(double_model).eval()
    with torch.no_grad():
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer)
    method = build_method("ce_u", {"ignore_first_n_answer_tokens": n_skip, "gamma": 0.8, "alpha": 0.5,
                                   "retain": retain})
    loss = sum(method.loss(double_model, batch, Reference(ref_model, shared=False)).values())
    retain_term = retain_nll(double_model, batch["retain"]) if retain == "nll" else \
        retain_kl(double_model, ref_model, batch["retain"])
    assert_same(loss, double_model, 0.8 * ceu_reference(double_model, batch["forget"], n_skip) + 0.5 * retain_term)


def test_default_is_the_forget_term_alone(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    terms = build_method("ce_u").loss(double_model, batch, None)
    assert list(terms) == ["forget"]
    assert_same(terms["forget"], double_model, ceu_reference(double_model, batch["forget"], 1))


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("ce_u", world_base, fresh)
    assert after > before


def test_runs_on_a_user_qa_file(taught, fresh):
    before, after, _ = run_tiny("ce_u", taught, fresh)
    assert after > before


def document_batch(tokenizer):
    """Rows labelled everywhere (no -100: documents, loss on every token), right-padded as the engine pads."""
    texts = ["Morvexia is treated with zalpradine in the cold season.", "The glimmerfin eats moss."]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}


@pytest.mark.parametrize("n_skip", [1, 2])
def test_gradient_on_rows_without_a_prompt_follows_the_equation(double_model, tiny_tokenizer, n_skip):
    """With no -100 in a row, the loss and its gradient are the equation's over the predicted tokens after the
    first n (the footnote's rule applied to predicted tokens, as on QA rows); open-unlearning's mask, which keeps one
    more predicted token per such row, gives another gradient, which this test tells apart."""
    batch = document_batch(tiny_tokenizer)
    assert bool((batch["labels"][:, 0] != -100).all())
    method = build_method("ce_u", {"ignore_first_n_answer_tokens": n_skip})
    assert_same(method.loss(double_model, {"forget": batch}, None)["forget"], double_model,
                ceu_reference(double_model, batch, n_skip))
    ours = grads(double_model, method.loss(double_model, {"forget": batch}, None)["forget"])
    # open-unlearning's mask (compute_batch_ceu, 2231e31) drops the first n_skip *labels* before the shift; on these
    # rows the first label (position 0) is never predicted, so it drops n_skip - 1 predicted tokens
    theirs = grads(double_model, ceu_reference(double_model, batch, n_skip - 1))
    diff = sum(float((ours[k] - theirs[k]).norm() ** 2) for k in ours) ** 0.5
    size = sum(float(theirs[k].norm() ** 2) for k in theirs) ** 0.5
    assert diff > 1e-3 * size, (diff, size)
