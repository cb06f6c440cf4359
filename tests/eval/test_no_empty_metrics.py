"""Issue #42, item 1: no metric is computed over zero items or tokens (it is absent, with one line saying why), and a
continuation longer than ``max_len`` (MUSE's verbmem: ~1,400-token prompts) is scored in the model's context, its
prompt cut from the left."""

from __future__ import annotations

import copy

import pytest

from obliviate.eval.suite import NO_TOKENS, evaluate_task, text_loss
from obliviate.models.builders import tiny_random
from obliviate.tasks.base import Data, EvalSet, PromptFormat, Task


@pytest.fixture(scope="module")
def model(tiny_tokenizer):
    return tiny_random("llama", vocab_size=len(tiny_tokenizer), max_len=512, n_layer=2).eval()


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_a_prompt_past_max_len_and_past_the_context_still_scores_its_continuation(model, tiny_tokenizer):
    prompt = " ".join(["Doctors treat Morvexia with zalpradine."] * 60)  # longer than the context (512)
    cont = "The glimmerfin eats moss and its cells glow."
    assert len(_ids(tiny_tokenizer, prompt)) > 512
    n_cont = len(_ids(tiny_tokenizer, cont)) + 1  # and its eos
    r = text_loss(model, tiny_tokenizer, [cont], max_len=256, prompts=[prompt])  # 256: the old fixed cut
    assert r["tokens"] == n_cont and r["loss"] > 0 and r["prompts_cut"] == 1
    # the same continuation after only the prompt's last tokens is scored the same: the prompt was cut from the left
    short = tiny_tokenizer.decode(_ids(tiny_tokenizer, prompt)[-(512 - n_cont - 1):])
    r2 = text_loss(model, tiny_tokenizer, [cont], prompts=[short])
    assert r2["tokens"] == n_cont and r2["loss"] == pytest.approx(r["loss"], rel=1e-4)


def test_a_prompt_between_max_len_and_the_context_is_not_cut(model, tiny_tokenizer):
    prompt = " ".join(["Doctors treat Morvexia with zalpradine."] * 15)
    assert 256 < len(_ids(tiny_tokenizer, prompt)) < 480
    r = text_loss(model, tiny_tokenizer, ["The glimmerfin eats moss."], max_len=256, prompts=[prompt])
    assert r["tokens"] > 0 and r["prompts_cut"] == 0


def test_zero_tokens_is_absent_not_zero(model, tiny_tokenizer):
    assert text_loss(model, tiny_tokenizer, [])["absent"].startswith(NO_TOKENS)
    tok = copy.deepcopy(tiny_tokenizer)
    tok.eos_token = None  # no eos after an empty continuation: nothing at all to score
    r = text_loss(model, tok, [""], prompts=["Question: what?"])
    assert r["tokens"] == 0 and "loss" not in r and "ppl" not in r and r["absent"].startswith(NO_TOKENS)


def test_evaluate_task_leaves_a_metric_over_nothing_out_and_says_why(model, tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    tok.eos_token = None
    task = Task(name="t", forget=Data(qa=[("q", "a")]), retain=Data(qa=[("r", "b")]), prompt=PromptFormat(),
                evals=[EvalSet("forget_qa", "forget", "qa", [{"question": "What is Morvexia treated with?",
                                                              "answer": "zalpradine"}]),
                       EvalSet("verbmem_forget", "forget", "text", [{"text": "", "prompt": "Doctors treat"}]),
                       EvalSet("docs", "extra", "text", [{"text": "The glimmerfin eats moss."}])])
    m = evaluate_task(model, tok, task)
    assert "verbmem_forget_loss" not in m and "verbmem_forget_ppl" not in m
    assert set(m["absent"]) == {"verbmem_forget_loss", "verbmem_forget_ppl"}
    assert m["absent"]["verbmem_forget_loss"].startswith("verbmem_forget_loss: not computed, no token to score")
    assert m["docs_loss"] > 0 and m["docs_tokens"] > 0 and m["forget_score"] is not None
