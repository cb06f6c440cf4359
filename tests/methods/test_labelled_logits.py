"""Log-probabilities with logits only at labelled positions equal those from the full B x T x V logits."""

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

from obliviate.data import collate
from obliviate.losses import masked_mean, token_nll
from obliviate.unlearning.objectives import answer_logprob, forward_logits, mean_labelled_nll, sequence_logprob
from obliviate.models.builders import tiny_llama


def _batch(vocab):
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(1, vocab, (n,), generator=g).numpy() for n in (7, 4, 9)]
    masks = [[i >= 2 for i in range(len(s))] for s in seqs]  # the first two tokens are the prompt
    return collate(seqs, 0, label_mask=masks)


def _gemma2(vocab):
    torch.manual_seed(0)
    return Gemma2ForCausalLM(Gemma2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                          max_position_embeddings=32, final_logit_softcapping=30.0)).eval()


@pytest.mark.parametrize("make", [lambda v: tiny_llama(v, n_layer=2, d_model=16, n_head=2, seed=0).eval(), _gemma2],
                         ids=["llama", "gemma2-softcap"])
def test_labelled_logits_equal_full_logits(make):
    model = make(60).double()  # two computations (N rows or B x T rows of logits): float64, so rounding is ~1e-15
    batch = _batch(60)
    full = forward_logits(model, batch)
    assert torch.allclose(sequence_logprob(model, batch), answer_logprob(full, batch["labels"]), atol=1e-5)
    assert torch.allclose(mean_labelled_nll(model, batch), masked_mean(*token_nll(full, batch["labels"])), atol=1e-6)
    # gradients agree too
    model.zero_grad()
    sequence_logprob(model, batch).sum().backward()
    g1 = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    answer_logprob(forward_logits(model, batch), batch["labels"]).sum().backward()
    g2 = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g1, g2))
