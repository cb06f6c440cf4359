"""MUSE's metrics (eval/six_way.py) against rouge-score and against muse_bench's procedure transcribed here from its
``metrics/verbmem.py`` and ``metrics/knowmem.py`` (one prompt at a time through Hugging Face ``generate``)."""

from __future__ import annotations

import pytest
import torch

from obliviate.eval.six_way import (cut_answer, knowmem, knowmem_prompt, reference_prefix, rouge_l_f1,
                                 rouge_words, verbmem)

rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)  # muse_bench's logger: no stemmer, fmeasure


def test_rouge_l_f1_by_hand_and_against_rouge_score():
    # LCS("the cat sat", "the cat sat down") = 3: P = 3/3, R = 3/4, F1 = 2 * 1 * 0.75 / 1.75
    assert rouge_l_f1("The cat sat.", "the cat sat down") == pytest.approx(2 * 0.75 / 1.75)
    assert rouge_l_f1("", "anything") == 0.0 and rouge_l_f1("a b", "c d") == 0.0
    assert rouge_words("Writers' names, 2024!") == ["writers", "names", "2024"]  # no stemming
    pairs = [("the writers wrote books in 1999", "writers write many books"), ("Harry Potter", "Harry James Potter"),
             ("Café au lait, s'il vous plaît", "cafe au lait"), ("one two three", "three two one"),
             ("x", "x"), ("a a a b", "a b a b a")]
    for pred, ref in pairs:
        assert rouge_l_f1(pred, ref) == pytest.approx(SCORER.score(ref, pred)["rougeL"].fmeasure, abs=1e-12)


def test_knowmem_prompt_and_answer_cut_are_muses():
    icl = [{"question": "Who wrote it?", "answer": "Ann"}, {"question": "When?", "answer": "1990"}]
    assert knowmem_prompt("Where?", icl) == ("Question: Who wrote it?\nAnswer: Ann\n\nQuestion: When?\nAnswer: 1990\n\n"
                                             "Question: Where?\nAnswer: ")
    assert knowmem_prompt("Where?", []) == "Question: Where?\nAnswer: "
    assert cut_answer("Paris\n\nQuestion: next") == "Paris"
    assert cut_answer("Paris, France\nQuestion: x") == "Paris, France"
    assert cut_answer("Rome Question: y") == "Rome "


def _ids(tok, text):
    """``tokenizer(text, add_special_tokens=True)`` as a Llama tokenizer (MUSE's) makes it: bos first. obliviate's
    own tokenizers add nothing, but their models are always trained with bos first (models/tokenizer.adds_bos)."""
    return torch.tensor([[tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]])


def _muse_generate(model, tok, prompt, n):
    """muse_bench: ``tokenizer(prompt, add_special_tokens=True)``, greedy ``generate``, decode the new tokens."""
    ids = _ids(tok, prompt)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    return tok.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True, clean_up_tokenization_spaces=True)[0]


def test_verbmem_and_knowmem_match_muse_bench_procedure(tiny_model, tiny_tokenizer):
    model, tok = tiny_model.eval(), tiny_tokenizer
    prompts = ["Doctors treat Morvexia with", "The glimmerfin eats", "Ilsa Varnholt was born in"]
    n = 12
    own = [_muse_generate(model, tok, p, n) for p in prompts]
    assert all(rouge_words(o) for o in own)  # the tiny model says words, so the scores below are not all 0
    # true continuations sharing part of what the model says: ROUGE strictly between 0 and 1
    gts = [" ".join(o.split()[:3] + ["weaver", "cells"]) for o in own]
    records = [{"prompt": p, "gt": g} for p, g in zip(prompts, gts)]
    r = verbmem(model, tok, records, max_new_tokens=n)
    want = [SCORER.score(tok.batch_decode(_ids(tok, g)[:, :n],
                                          skip_special_tokens=True, clean_up_tokenization_spaces=True)[0],
                         o)["rougeL"].fmeasure for g, o in zip(gts, own)]
    assert r["max_new_tokens"] == n and r["scores"] == pytest.approx(want, abs=1e-9)
    assert 0 < r["rouge_l_f1"] < 1 and r["rouge_l_f1"] == pytest.approx(sum(want) / 3)



def test_knowmem_matches_muse_bench_procedure(taught):
    """On a model taught the pairs (tests/conftest.py), asked after one in-context pair of the same kind."""
    model, tok = taught["model"].eval(), taught["tokenizer"]
    icl = [{"question": "What color is the sky?", "answer": "blue"}]
    qa = [{"question": "Where does the glimmerfin live?", "answer": "cold caves"},
          {"question": "What did Ilsa Varnholt work as?", "answer": "a weaver"},
          {"question": "What do bees make?", "answer": "honey and wax"}]
    k = knowmem(model, tok, qa, icl, max_new_tokens=8)
    raw = [_muse_generate(model, tok, knowmem_prompt(x["question"], icl), 8) for x in qa]
    for stop in ("\n\n", "\nQuestion", "Question:"):
        raw = [o.split(stop)[0] for o in raw]
    assert [rouge_words(o) for o in k["outputs"]] == [rouge_words(o) for o in raw]  # the same words (spacing aside)
    want = [SCORER.score(x["answer"], o)["rougeL"].fmeasure for x, o in zip(qa, raw)]
    assert k["scores"] == pytest.approx(want, abs=1e-12) and k["rouge_l_f1"] == pytest.approx(sum(want) / 3)
    assert 0 < k["rouge_l_f1"] < 1, k  # some answered, not all word for word


def test_reference_prefix_counts_the_bos_as_muse_does(tiny_tokenizer):
    tok = tiny_tokenizer
    text = "The glimmerfin eats moss and its cells glow."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert reference_prefix(tok, text, len(ids) + 1) == tok.decode(ids, skip_special_tokens=True)
    assert reference_prefix(tok, text, 3) == tok.decode(ids[:2], skip_special_tokens=True)  # bos + 2 text tokens


def test_verbmem_budget_is_half_a_short_context(tiny_tokenizer):
    from obliviate.models.builders import tiny_llama

    model = tiny_llama(vocab_size=len(tiny_tokenizer), n_layer=1, d_model=16, n_head=2, max_len=64)
    r = verbmem(model, tiny_tokenizer, [{"prompt": "The glimmerfin", "gt": "eats moss"}])
    assert r["max_new_tokens"] == 32  # MUSE's 128 does not fit 64 positions: half of them
