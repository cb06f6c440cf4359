"""Issue #16: bounded work on hostile inputs (huge prompts, --limit), one-line errors where torch or the
tokenizer used to raise, and evaluation that refuses non-finite logits.

Each test fails if the behaviour it names comes back; docs/bad-input.md lists them next to the error each
input gets.
"""

import json
import time
import warnings

import pytest
import torch
import transformers as T

from obliviate.benchmarks.generic import load_records
from obliviate.errors import DataError
from obliviate.eval.benchmark import evaluate_benchmark, load_benchmark_examples

FIFTY_MB = 50 * 2**20


def gpt2(tok, n_positions: int):
    """A tiny GPT-2 with ``n_positions`` rows of position embeddings (position n_positions is an IndexError)."""
    config = T.GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=16, n_inner=32, n_layer=1, n_head=2,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=tok.pad_token_id,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return T.GPT2LMHeadModel(config).eval()


def n_tokens(tok, text):
    return len(tok(text, add_special_tokens=False)["input_ids"])


# --------------------------------------------------------------------------- prompts longer than the model


def test_a_599_token_mcq_prompt_on_a_512_position_gpt2_is_cut_with_a_warning(tiny_tokenizer, tmp_path):
    """It used to end in a raw ``IndexError: index out of range in self`` (GPT-2's position embedding)."""
    tok = tiny_tokenizer
    unit = "Doctors treat Morvexia with zalpradine. "
    question = unit * (599 // n_tokens(tok, unit) + 1)
    assert n_tokens(tok, question) >= 599
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps({"question": question, "choices": ["moss", "zalpradine"], "answer_index": 1}) + "\n")
    model = gpt2(tok, 512)
    with pytest.warns(UserWarning, match="cut from the left"):
        res = evaluate_benchmark(model, tok, data=f, kind="mcq")
    assert res["n"] == 1 and res["accuracy"] in (0.0, 1.0)
    f = tmp_path / "long_qa.jsonl"
    f.write_text(json.dumps({"question": question, "answer": "zalpradine"}) + "\n")
    with pytest.warns(UserWarning, match="cut from the left"):
        res = evaluate_benchmark(model, tok, data=f, kind="qa", max_new_tokens=4)
    assert res["n"] == 1


def test_a_50_mb_question_is_clipped_before_the_tokenizer_sees_it(tiny_tokenizer, tmp_path):
    """Tokenising 50 MB took minutes and about 10 GB (the process was killed, with no message). Only the
    characters that can be among the last 512 tokens are tokenised now, with the usual warning; the result
    is the same as for the question's tail alone."""
    tok = tiny_tokenizer
    unit = "The glimmerfin eats moss and its cells glow. "
    question = unit * (FIFTY_MB // len(unit))
    tail = question[-4000:]
    model = gpt2(tok, 512)
    rows = [{"question": q, "choices": ["moss", "zalpradine"], "answer_index": 0} for q in (question, tail)]
    f = tmp_path / "huge.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="choice_logprobs: 4 of 4 context"):
        res = evaluate_benchmark(model, tok, data=f, kind="mcq")
    qa = [{"question": q, "answer": "moss"} for q in (question, tail)]
    f = tmp_path / "huge_qa.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in qa))
    with pytest.warns(UserWarning, match="were cut from the left"):
        res_qa = evaluate_benchmark(model, tok, data=f, kind="qa", max_new_tokens=4)
    assert time.perf_counter() - start < 60  # a few seconds; tokenising 50 MB whole takes minutes
    scores = res["per_example"]["scores"] if "scores" in res["per_example"] else None
    assert res["per_example"]["prediction"][0] == res["per_example"]["prediction"][1]
    if scores is not None:
        assert scores[0] == pytest.approx(scores[1], abs=1e-4)
    assert res_qa["per_example"]["prediction"][0] == res_qa["per_example"]["prediction"][1]


def test_a_50_mb_training_question_is_clipped_before_the_tokenizer_sees_it(tiny_tokenizer):
    from obliviate.data import encode_data
    from obliviate.eval.mia import token_logprob_stats

    tok = tiny_tokenizer
    huge = "Doctors treat Morvexia with zalpradine. " * (FIFTY_MB // 40)
    start = time.perf_counter()
    seqs, masks, stats = encode_data(tok, [(huge, " zalpradine."), ("Short?", " Yes.")], max_len=64)
    assert len(seqs[0]) == 64 and stats["qa_cut"] == 1
    with pytest.warns(UserWarning, match="token_logprob_stats: 1 of 1 examples were cut"):
        (row,) = token_logprob_stats(gpt2(tok, 64), tok, [" zalpradine."], prefixes=[huge])
    assert len(row["token_ids"]) == n_tokens(tok, " zalpradine.") + 1
    assert time.perf_counter() - start < 30


# --------------------------------------------------------------------------- --limit


@pytest.mark.parametrize("name,body", [
    ("a.jsonl", b'{"question": "Who?", "answer": "Me."}\n{"question": "Where?", "answer": "Here."}\n{oops\n'),
    ("a.csv", b"question,answer\nWho?,Me.\nWhere?,Here.\n\xff\xfe,x\n"),
])
def test_eval_data_with_limit_reads_no_further_than_the_limit(tmp_path, name, body):
    """``eval --data F --limit N`` parsed the whole file and only then kept N; line 3 (broken) proves that
    nothing past the limit is read."""
    f = tmp_path / name
    f.write_bytes(body)
    _, _, examples = load_benchmark_examples(data=f, kind="qa", limit=2)
    assert [e.question for e in examples] == ["Who?", "Where?"]
    with pytest.raises(DataError, match=r"line [34]: (invalid JSON|not valid UTF-8)"):
        load_benchmark_examples(data=f, kind="qa", limit=3)


# --------------------------------------------------------------------------- text that is not Unicode


@pytest.mark.parametrize("record,kind,message", [
    ('{"question": "ab\\ud800", "answer": "b"}', "qa", "field 'question' holds a lone surrogate \\ud800 at character 3"),
    ('{"question": "q", "answer": "\\udfff!"}', "qa", "field 'answer' holds a lone surrogate \\udfff at character 1"),
    ('{"question": "q", "choices": ["x", "y\\udc00"], "answer_index": 0}', "mcq",
     "field 'choices' holds a lone surrogate \\udc00 at character 2"),
])
def test_a_lone_surrogate_is_refused_naming_file_line_and_field(tmp_path, record, kind, message):
    """A JSON escape for half a UTF-16 pair was taken as text; the tokenizer then raised UnicodeEncodeError."""
    f = tmp_path / "s.jsonl"
    f.write_text('{"question": "fine", "answer": "ok", "choices": ["a", "b"], "answer_index": 0}\n' + record + "\n")
    with pytest.raises(DataError) as e:
        load_records(f, kind)
    assert str(e.value).startswith(f"s.jsonl line 2: {message}") and "\n" not in str(e.value)
    assert load_records(tmp_path / "s.jsonl", kind, limit=1)  # the first line is fine
    f.write_text('{"question": "a pair: \\ud83d\\ude00", "answer": "b"}\n')  # a whole pair is an emoji
    assert load_records(f)[0].question == "a pair: \U0001F600"


def test_error_messages_cap_a_long_answer_value(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"question": "q", "choices": ["x", "y"], "answer_index": "z" * 10**6}) + "\n")
    with pytest.raises(DataError) as e:
        load_records(f, "mcq")
    assert len(str(e.value)) < 300 and "is not an index, a letter, or exactly one choice" in str(e.value)


# --------------------------------------------------------------------------- YAML alias bombs at the command line

LAUGHS = "".join(f"    {chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("where", ["params", "known key"])
def test_an_alias_bomb_under_unlearn_params_or_a_known_key_is_refused_at_once(tmp_path, capsys, where):
    """Under ``unlearn.params`` there was no answer after 200 s (memory still growing); under a known key it
    ended in a MemoryError after 118 s because the error message printed the whole value."""
    from obliviate.cli import main

    if where == "params":
        text = "unlearn:\n  params:\n    a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + LAUGHS
    else:
        text = ("unlearn:\n  train:\n    lr:\n      a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
                + LAUGHS.replace("    ", "      "))
    f = tmp_path / "bomb.yaml"
    f.write_text(text)
    out = tmp_path / "o"
    start = time.perf_counter()
    rc = main(["unlearn", "--config", str(f), "--out", str(out), "--base", str(tmp_path / "no-model"),
               "--method", "npo"])
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("obliviate:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and len(lines[0]) < 300
    assert "uses the alias *a; YAML aliases are not supported" in lines[0]
    assert not (out / "results.json").exists()
