"""eval.core: context-length truncation, answer probabilities (checked by hand), progress bars, the harmonic mean."""

import math
import warnings

import numpy as np
import pytest
import torch
import transformers as T

from obliviate.data import TokenDataset, qa_prompt
from obliviate.errors import ModelError
from obliviate.eval.core import (
    fit_context, answer_probs, choice_logprobs, greedy_generate, harmonic_mean, mcq_accuracy, model_max_length,
    qa_accuracy, token_loss_by_label,
)
from obliviate.models.builders import tiny_random

LONG = "Doctors treat Morvexia with zalpradine. The glimmerfin eats moss and its cells glow. " * 3  # > 32 tokens


@pytest.fixture
def gpt2_32(tiny_tokenizer):
    """A tiny GPT-2 that takes at most 32 positions (wpe has 32 rows: position 32 would be an IndexError), in
    float64: the package's batched (padded, cached) scores and greedy tokens are checked against unbatched forwards,
    which round apart (and could flip a near-tie argmax in float32)."""
    tok = tiny_tokenizer
    config = T.GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=32, n_inner=64, n_layer=2, n_head=4,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=tok.pad_token_id,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return T.GPT2LMHeadModel(config).double().eval()


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_model_max_length(gpt2_32, tiny_model):
    assert model_max_length(tiny_random("gpt2")) == 128  # GPT2Config.n_positions
    assert model_max_length(tiny_random("llama")) == 128  # max_position_embeddings
    assert model_max_length(gpt2_32) == 32
    assert model_max_length(torch.nn.Linear(2, 2)) is None  # no config


def test_fit_cuts_prefix_from_the_left_keeping_bos():
    bos = 1
    assert fit_context([1, 10, 11, 12], [20], None, bos) == ([1, 10, 11, 12], [20], False)
    assert fit_context([1, 10, 11, 12], [20], 5, bos) == ([1, 10, 11, 12], [20], False)
    assert fit_context([1, 10, 11, 12], [20], 4, bos) == ([1, 11, 12], [20], True)
    assert fit_context([1, 10, 11, 12], [20, 21, 22], 4, bos) == ([1], [20, 21, 22], True)
    assert fit_context([1, 10, 11, 12], [20, 21, 22, 23], 4, bos) == ([1], [20, 21, 22], True)  # suffix alone too long
    assert fit_context([10, 11, 12], [20], 3, None) == ([11, 12], [20], True)  # no bos: plain left cut
    assert fit_context([10, 11, 12], [20, 21, 22], 3, None) == ([12], [20, 21], True)


def manual_greedy(model, ids: list[int], n: int, eos: int) -> list[int]:
    """Unbatched, uncached greedy decoding: the reference for greedy_generate."""
    out = []
    for _ in range(n):
        with torch.no_grad():
            nxt = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
        if nxt == eos:
            break
        out.append(nxt)
    return out


def test_greedy_generate_cuts_long_prompts(gpt2_32, tiny_tokenizer):
    model, tok = gpt2_32, tiny_tokenizer
    prompts = ["Doctors treat Morvexia with", LONG]
    assert len(ids_of(tok, LONG)) + 1 + 8 > 32
    with pytest.warns(UserWarning) as rec:
        got = greedy_generate(model, tok, prompts, max_new_tokens=8, stop=None)
    msgs = [str(w.message) for w in rec]
    assert msgs == ["greedy_generate: 1 of 2 prompts were cut from the left to 24 tokens so that prompt + "
                    "max_new_tokens=8 fits the model's 32 positions"]
    for p, g in zip(prompts, got):
        kept = [tok.bos_token_id] + ids_of(tok, p)[-23:]  # bos + the last 23 tokens = 24
        assert g == tok.decode(manual_greedy(model, kept, 8, tok.eos_token_id), skip_special_tokens=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # short prompts: no warning
        greedy_generate(model, tok, prompts[:1], max_new_tokens=8)
    with pytest.raises(ModelError, match="max_new_tokens=32 leaves no room for a prompt in the model's 32 positions"):
        greedy_generate(model, tok, prompts, max_new_tokens=32)


def manual_logprob(model, ctx: list[int], cont: list[int]) -> float:
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ctx + cont])).logits[0].double(), -1)
    return float(sum(logp[len(ctx) + j - 1, t] for j, t in enumerate(cont)))


def test_choice_logprobs_cuts_long_contexts(gpt2_32, tiny_tokenizer):
    model, tok = gpt2_32, tiny_tokenizer
    conts = [" zalpradine.", " moss and its cells glow."]
    with pytest.warns(UserWarning, match="^choice_logprobs: 2 of 4 context \\+ continuation pairs were longer than "
                                         "the model's 32 positions; their contexts were cut from the left to fit$"):
        got = choice_logprobs(model, tok, ["Doctors treat Morvexia with", LONG], [conts, conts], batch_size=3)
    bos = tok.bos_token_id
    for ctx, row in zip(["Doctors treat Morvexia with", LONG], got):
        for cont, score in zip(conts, row):
            x = ids_of(tok, cont)
            c = [bos] + ids_of(tok, ctx)[-(32 - 1 - len(x)):]
            assert len(c) + len(x) <= 32
            assert score == pytest.approx(manual_logprob(model, c, x), abs=1e-4)
    mcqs = [{"question": LONG, "choices": ["a", "b"], "answer_index": 0}]
    with pytest.warns(UserWarning, match="choice_logprobs: 2 of 2"):
        assert mcq_accuracy(model, tok, mcqs)["n"] == 1


def manual_answer_prob(model, tok, prompt: str, answer: str) -> float:
    """exp(-mean NLL) of answer + eos after [bos] + prompt, from one unbatched forward pass."""
    p = [tok.bos_token_id] + ids_of(tok, prompt)
    a = ids_of(tok, answer) + [tok.eos_token_id]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([p + a])).logits[0].double(), -1)
    nll = [-float(logp[len(p) + j - 1, t]) for j, t in enumerate(a)]
    return math.exp(-sum(nll) / len(nll))


def test_answer_probs_by_hand(tiny_model, tiny_tokenizer):
    model, tok = tiny_model.double(), tiny_tokenizer  # float64: batched (padded) against unbatched forwards
    prompts = [qa_prompt("What is Morvexia treated with?"), qa_prompt("Where?"), "Ilsa Varnholt was born in"]
    answers = [" Morvexia is treated with zalpradine.", " In caves.", " Dremmin"]  # different lengths: padding
    model.train()
    got = answer_probs(model, tok, prompts, answers, batch_size=2)
    assert model.training  # mode restored
    model.eval()
    expected = [manual_answer_prob(model, tok, p, a) for p, a in zip(prompts, answers)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert all(0 < g < 1 for g in got)
    # qa_accuracy scores " " + answer after qa_prompt(question), as trained
    res = qa_accuracy(model, tok, ["What is Morvexia treated with?", "Where?"], ["Morvexia is treated with zalpradine.",
                                                                                  "In caves."], max_new_tokens=4)
    assert res["answer_probs"] == pytest.approx(expected[:2], abs=1e-6)
    assert res["answer_prob"] == pytest.approx(np.mean(expected[:2]), abs=1e-6)
    assert math.isnan(qa_accuracy(model, tok, [], [])["answer_prob"])
    with pytest.raises(ValueError, match="2 prompts but 1 answers"):
        answer_probs(model, tok, prompts[:2], answers[:1])


def test_answer_probs_cut_long_prompts(gpt2_32, tiny_tokenizer):
    model, tok = gpt2_32, tiny_tokenizer
    answer = " zalpradine."
    with pytest.warns(UserWarning, match="^answer_probs: 1 of 2 prompts were cut from the left so that prompt \\+ "
                                         "answer fits the model's 32 positions$"):
        got = answer_probs(model, tok, ["Doctors treat Morvexia with", LONG], [answer, answer])
    a = ids_of(tok, answer) + [tok.eos_token_id]
    p = [tok.bos_token_id] + ids_of(tok, LONG)[-(32 - 1 - len(a)):]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([p + a])).logits[0].double(), -1)
    expected = math.exp(sum(float(logp[len(p) + j - 1, t]) for j, t in enumerate(a)) / len(a))
    assert got[1] == pytest.approx(expected, abs=1e-6)


def test_progress_bars_do_not_change_results(tiny_model, tiny_tokenizer, capsys):
    model, tok = tiny_model, tiny_tokenizer
    qs, ans = ["What is Morvexia treated with?"], ["zalpradine"]
    quiet = qa_accuracy(model, tok, qs, ans, max_new_tokens=4)
    assert capsys.readouterr().err == ""
    loud = qa_accuracy(model, tok, qs, ans, max_new_tokens=4, progress=True)
    err = capsys.readouterr().err
    assert "generating" in err and "answer probabilities" in err
    assert loud == quiet
    mcqs = [{"question": "Red?", "choices": ["blue", "red"], "answer_index": 1}]
    assert mcq_accuracy(model, tok, mcqs, progress=True) == mcq_accuracy(model, tok, mcqs)
    assert "choice log-probs" in capsys.readouterr().err
    ds = TokenDataset([np.array([1, 5, 6, 7, 2]), np.array([1, 8, 9, 2])],
                      {"domain": [np.array([0, 0, 1, 1, 1]), np.array([1, 1, 0, 0])]}, {"domain": ["a", "b"]})
    assert token_loss_by_label(model, ds, progress=True) == token_loss_by_label(model, ds)
    assert "token loss by domain" in capsys.readouterr().err


def test_one_token_options_share_one_forward_and_equal_separate_scoring(gpt2_32, tiny_tokenizer):
    """Lettered MCQs: every option is one token after the same context, so all are read off one forward pass
    (as lm-eval groups them); the scores equal scoring each context + option on its own."""
    model, tok = gpt2_32, tiny_tokenizer
    letters = [w for w in (tok.decode([i]) for i in range(40, 400)) if len(ids_of(tok, w)) == 1][:4]
    assert len(letters) == 4
    calls = []
    hook = model.register_forward_hook(lambda m, a, k, o: calls.append(1), with_kwargs=True)
    try:
        got = choice_logprobs(model, tok, ["Q: one?\nAnswer:", "Q: two, longer?\nAnswer:"], [letters, letters])
    finally:
        hook.remove()
    bos = tok.bos_token_id
    for ctx, row in zip(["Q: one?\nAnswer:", "Q: two, longer?\nAnswer:"], got):
        for x, score in zip(letters, row):
            assert score == pytest.approx(manual_logprob(model, [bos] + ids_of(tok, ctx), ids_of(tok, x)), abs=1e-4)
    assert len(calls) <= 1  # one batched forward (logits_at may run the body only)


def successor_model(tok):
    """A 1-layer Llama whose greedy next token is always the current token's id + 1 (mod the vocabulary):
    attention and MLP write nothing, and ``lm_head`` row y is the unit embedding of y - 1."""
    from obliviate.models.builders import tiny_llama

    model = tiny_llama(len(tok), n_layer=1, d_model=64, n_head=2, tie_embeddings=False, seed=3).eval()
    with torch.no_grad():
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        e = torch.nn.functional.normalize(model.model.embed_tokens.weight, dim=-1)
        model.model.embed_tokens.weight.copy_(e)
        model.lm_head.weight.copy_(torch.roll(e, 1, dims=0))
    return model


def test_generation_ends_when_every_row_has_passed_the_stop(tiny_tokenizer, monkeypatch):
    import obliviate.eval.core as core

    tok = tiny_tokenizer
    model = successor_model(tok)
    table = core.stop_token_table(tok, "\n", len(tok))
    assert table.any() and all(("\n" in tok.decode([i])) == bool(table[i]) for i in range(len(tok)))
    # prompts whose last token reaches a newline token after 1, 3, ... steps of the successor chain
    newline = int(table.nonzero()[0])
    starts = [t for t in range(newline - 12, newline) if t > tok.eos_token_id and ids_of(tok, tok.decode([t])) == [t]]
    prompts = [tok.decode([t]) for t in starts]
    assert len(prompts) >= 3
    forwards = []
    model.register_forward_hook(lambda *a: forwards.append(1))
    got = greedy_generate(model, tok, prompts, max_new_tokens=24, batch_size=len(prompts))
    steps = len(forwards)
    monkeypatch.setattr(core, "stop_token_table", lambda tk, stop, n: torch.zeros(n, dtype=torch.bool))
    forwards.clear()
    assert greedy_generate(model, tok, prompts, max_new_tokens=24, batch_size=len(prompts)) == got
    assert len(forwards) == 24  # without the table, the batch runs to its budget
    first_stop = [next(j for j in range(1, 25) if table[(t + j) % len(tok)]) for t in starts]
    assert steps == max(first_stop) < 24
    for t, g in zip(starts, got):  # the texts a full, unbatched run gives, cut at the stop
        full = manual_greedy(model, [tok.bos_token_id, t], 24, tok.eos_token_id)
        assert g == tok.decode(full, skip_special_tokens=True).split("\n")[0]


def test_byte_fallback_newlines_never_stop_generation():
    # SentencePiece's byte fallback (Llama 2, Mistral): a newline is the piece <0x0A>, and the decoder turns a whole
    # run of byte pieces into "�" when one is not UTF-8, so bytes generated after it can take the newline away
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    import obliviate.eval.core as core

    pieces = ["<unk>", "<s>", "</s>", "▁foo", "a\n"] + [f"<0x{b:02X}>" for b in range(256)]
    spm = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[], byte_fallback=True,
                               unk_token="<unk>"))
    spm.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok = PreTrainedTokenizerFast(tokenizer_object=spm, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    nl, foo = pieces.index("<0x0A>"), pieces.index("▁foo")
    assert tok.decode([foo, nl]) == "foo\n"
    assert "\n" not in tok.decode([foo, nl, pieces.index("<0xE2>"), pieces.index("<0x82>"), foo])  # why
    table = core.stop_token_table(tok, "\n", len(tok) + 3)
    assert table.nonzero().flatten().tolist() == [pieces.index("a\n")]  # a piece holding a newline still stops


def test_the_one_harmonic_mean_by_hand():
    """The package's one harmonic mean (TOFU's model utility, UQ, EMBER's delta score, a metric's robustness)."""
    assert harmonic_mean([1.0, 0.5, 0.25]) == pytest.approx(3 / 7)  # 3 / (1 + 2 + 4)
    assert harmonic_mean((0.8, 0.6)) == pytest.approx(0.96 / 1.4) and harmonic_mean([0.7]) == pytest.approx(0.7)
    assert harmonic_mean(iter([0.5, 0.5])) == pytest.approx(0.5)  # any iterable
    assert harmonic_mean([1.0, 0.0]) == 0.0 and harmonic_mean([0.9, -0.2]) == 0.0  # one side lost sinks it
    assert harmonic_mean([np.float32(0.5), 1]) == pytest.approx(2 / 3) and type(harmonic_mean([0.5])) is float
    for bad in ([], [0.5, float("nan")], [float("inf"), 0.5]):
        with pytest.raises(ValueError, match="a harmonic mean needs one or more finite numbers"):
            harmonic_mean(bad)


def test_drafts_change_the_steps_not_the_greedy_texts(taught, gpt2_32, tiny_tokenizer):
    """A draft (the reference answer) checked in one pass gives the texts of plain greedy generation, whether the
    model answers as the draft does, starts as it does and goes elsewhere, or does not; whatever the budget and
    stop. Both models in float64, so that the two ways' rounding cannot flip a near-tie argmax."""
    import copy
    import json

    model, tok, task = copy.deepcopy(taught["model"]).double(), taught["tokenizer"], taught["task"]
    pairs = [(r["question"], r["answer"]) for f in ("forget", "retain")
             for r in map(json.loads, taught[f].read_text().splitlines())]
    prompts = [task.prompt.prompt(q) for q, _ in pairs] + [task.prompt.prompt("Who sings at dawn?")]
    right = [task.prompt.answer(a) for _, a in pairs] + [" the lark"]
    drafts = {"right": right, "wrong": [" " + "zq" * (i % 3 + 1) for i in range(len(prompts))],
              "half": [d.split()[0] + " zz" if len(d.split()) > 1 else d + "x" for d in right],
              "empty": [""] * len(prompts), "mixed": [r if i % 2 else "" for i, r in enumerate(right)]}
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    for budget in (1, 2, 3, 12):
        for stop in ("\n", None):
            plain = greedy_generate(model, tok, prompts, budget, batch_size=5, stop=stop)
            for name, d in drafts.items():
                got = greedy_generate(model, tok, prompts, budget, batch_size=5, stop=stop, drafts=d)
                assert got == plain, (budget, stop, name)
    calls.clear()
    plain = greedy_generate(model, tok, prompts[:-1], 12, batch_size=len(pairs))
    steps = len(calls)
    calls.clear()
    assert greedy_generate(model, tok, prompts[:-1], 12, batch_size=len(pairs), drafts=right[:-1]) == plain
    hook.remove()
    assert [p.strip() for p in plain] == [a for _, a in pairs] and steps > 1 and len(calls) == 1  # one pass
    # a short row beside a long draft: its padded positions are not read
    short = ["", prompts[0]]
    assert (greedy_generate(model, tok, short, 12, drafts=["", right[0] + " and then a good many more words"])
            == greedy_generate(model, tok, short, 12))
    # a model that takes few positions, prompts cut from the left
    prompts, d = ["Doctors treat Morvexia with", LONG], [" zalpradine.", " moss"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for budget in (1, 4, 8):
            assert (greedy_generate(gpt2_32, tiny_tokenizer, prompts, budget, drafts=d)
                    == greedy_generate(gpt2_32, tiny_tokenizer, prompts, budget))
