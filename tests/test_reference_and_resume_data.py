"""Issue #28, items 7 and 8: the live reference runs as the cache is computed (eval mode, no autocast), and a
resume into a run directory whose checkpoints were trained on other data starts afresh."""

import copy

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from obliviate.unlearning.engine import DATA_FINGERPRINT, UnlearnConfig, unlearn, wrap_lora
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference, reference_logprobs
from obliviate.train import TrainConfig

FORGET = [(f"Question: What is Morvexia-{i} treated with?\nAnswer:", f" It is treated with drug{i}.")
          for i in range(6)]
RETAIN = [(f"Question: Where does fin-{i} live?\nAnswer:", f" It lives in cave{i}.") for i in range(6)]


def test_live_lora_reference_matches_the_cache_with_dropout_on(tiny_tokenizer):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tiny_tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                     resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    model = wrap_lora(GPT2LMHeadModel(cfg), ["*"])
    data = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, 0)
    cache = reference_logprobs(model, data, ["forget"])["forget"]
    model.train()  # as during unlearning: dropout is on in the model the live reference shares
    live = Reference(model, shared=True)
    batch = data(0)["forget"]
    got = live.answer_logprob(batch, "forget")
    # float32 on purpose (bfloat16 autocast below acts on float32 only): the cache's batches are sorted by length,
    # so the same rows may be padded otherwise: sums of about five log-probabilities near -6, a few ulps, ~1e-6
    assert torch.allclose(got, cache[batch["index"]], atol=1e-5)
    assert model.training  # the training flag is given back
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the cache is float32; so is the live reference
        assert torch.allclose(live.answer_logprob(batch, "forget"), cache[batch["index"]], atol=1e-5)


def _cfg(steps):
    return UnlearnConfig(method="gradascent", batch_size=3, seed=0,
                         train=TrainConfig(steps=steps, lr=1e-2, schedule="constant", progress=False, log_every=1,
                                           checkpoint_every=2))


def test_resume_on_edited_data_of_the_same_size_starts_afresh(tiny_model, tiny_tokenizer, tmp_path, caplog):
    out = tmp_path / "train"
    unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, _cfg(3), out)
    assert (out / DATA_FINGERPRINT).is_file() and any((out / "checkpoints").glob("step_*"))
    caplog.clear()
    # the same data: the run resumes from its step-2 checkpoint and says nothing about data
    _, same = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, FORGET, RETAIN, _cfg(3), out)
    assert same["resumed_from"] == 2 and "other data" not in caplog.text
    edited = [(q, a.replace("drug", "herb")) for q, a in FORGET]  # same row count, other answers
    _, fresh = unlearn(copy.deepcopy(tiny_model), tiny_tokenizer, edited, RETAIN, _cfg(3), out)
    err = caplog.text
    assert fresh["resumed_from"] == 0
    assert err.count("trained on other data") == 1 and "starting afresh" in err
