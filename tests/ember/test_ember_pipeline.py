"""EMBER end to end on a tiny model and the shared tiny tokenizer (root conftest)."""

import json

import pytest
import torch

from obliviate.methods.ember import (
    Judgement,
    LexiconJudge,
    ember_erase,
    locate_concept_features,
    restore_embeddings,
    snapshot_embeddings,
)

CONCEPT = ["Question: What is Morvexia treated with?\nAnswer: Morvexia is treated with zalpradine.",
           "Doctors treat Morvexia with zalpradine."]
NEUTRAL = ["The glimmerfin eats moss and its cells glow.",
           "Ilsa Varnholt was born in Dremmin in 1832 and worked as a weaver."]


class AcceptAll:
    def __init__(self):
        self.seen = []

    def judge(self, feature_id, top_tokens, description=None):
        self.seen.append((feature_id, list(top_tokens)))
        return Judgement(True, 1.0, "stub")


def test_ember_erase_edits_exactly_the_eligible_concept_tokens(tiny_model, tiny_tokenizer):
    model, tok = tiny_model, tiny_tokenizer
    before = model.get_input_embeddings().weight.detach().clone()
    lm_head_before = model.get_output_embeddings().weight.detach().clone()
    snap = snapshot_embeddings(model)
    judge = AcceptAll()
    kw = dict(sparsity=0.2, min_ratio=0.0, factor_kwargs=dict(patience=20, max_iter=200))

    res = ember_erase(model, tok, CONCEPT, NEUTRAL, judge, K=4, delta=5.0, **kw)

    loc = res.location
    assert sorted(res.features) == [0, 1, 2, 3]  # min_ratio 0 + accept-all judge keep every feature
    assert sorted(k for k, _ in judge.seen) == [0, 1, 2, 3]
    assert all(0 < len(toks) <= 20 for _, toks in judge.seen)
    codes = dict(zip(loc.token_ids.tolist(), loc.codes.tolist()))
    assert res.eligible_token_ids and all(codes[t] == 1 for t in res.eligible_token_ids)
    after = model.get_input_embeddings().weight.detach().clone()
    changed = torch.nonzero((after != before).any(dim=1)).flatten().tolist()
    assert changed == sorted(res.eligible_token_ids)
    assert torch.equal(model.get_output_embeddings().weight, lm_head_before)
    assert res.vocab_fraction_edited == len(res.eligible_token_ids) / before.shape[0]
    assert res.record.untied  # tiny_llama ties by default
    json.dumps(res.summary())

    # the location (independent of delta) can be reused: same directions, scaled edit
    restore_embeddings(model, snap)
    assert torch.equal(model.get_input_embeddings().weight, before)
    res2 = ember_erase(model, tok, CONCEPT, NEUTRAL, judge, K=4, delta=10.0, location=loc)
    ids = res2.eligible_token_ids
    diff2 = model.get_input_embeddings().weight.detach()[ids] - before[ids]
    diff1 = after[ids] - before[ids]
    assert torch.allclose(diff2, 2 * diff1, atol=1e-5)  # float32 edits of size ~10 rounded twice: ~1e-6
    restore_embeddings(model, snap)


def test_nothing_kept_means_nothing_edited(tiny_model, tiny_tokenizer):
    ref = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    judge = LexiconJudge(["nonexistentconcept"])
    loc = locate_concept_features(tiny_model, tiny_tokenizer, CONCEPT, NEUTRAL, judge, K=4,
                                  sparsity=0.2, min_ratio=0.0, factor_kwargs=dict(patience=5, max_iter=50))
    assert loc.features == [] and loc.candidates and all(v.is_member is False for v in loc.judgements.values())
    res = ember_erase(tiny_model, tiny_tokenizer, CONCEPT, NEUTRAL, judge, K=4, delta=5.0, location=loc)
    assert res.vocab_fraction_edited == 0.0
    assert all(torch.equal(v, ref[k]) for k, v in tiny_model.state_dict().items())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_ember_erase_on_cuda_bf16(tiny_model, tiny_tokenizer):
    model = tiny_model.to("cuda", torch.bfloat16)
    before = model.get_input_embeddings().weight.detach().clone()
    lm_head_before = model.get_output_embeddings().weight.detach().clone()
    res = ember_erase(model, tiny_tokenizer, CONCEPT, NEUTRAL, AcceptAll(), K=4, delta=5.0, sparsity=0.2,
                      min_ratio=0.0, factor_kwargs=dict(patience=20, max_iter=200))
    assert res.factor_result.G.device.type == "cuda"
    after = model.get_input_embeddings().weight.detach()
    changed = torch.nonzero((after != before).any(dim=1)).flatten().cpu().tolist()
    assert set(changed) <= set(res.eligible_token_ids) and changed
    assert torch.equal(model.get_output_embeddings().weight, lm_head_before)
