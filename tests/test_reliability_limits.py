"""Issue #16: bounded work on hostile inputs (huge prompts, --limit), one-line errors where torch or the
tokenizer used to raise, and evaluation that refuses non-finite logits.

Each test fails if the behaviour it names comes back; docs/bad-input.md lists them next to the error each
input gets.
"""

import json
import time

import pytest
import torch
import transformers as T

from _cli_errors import SMALL_WORLD
from _cli_errors import one_error as _one_error  # this file also caps the line's length
from obliviate.tasks.sources.generic import load_records
from obliviate.errors import DataError
from obliviate.eval.suite import evaluate_benchmark
from obliviate.tasks.benchmark import load_benchmark_examples

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
    assert len(res["_per_item"]["utility_long"]["correct"]) == 1 and res["utility_long_acc"] in (0.0, 1.0)
    f = tmp_path / "long_qa.jsonl"
    f.write_text(json.dumps({"question": question, "answer": "zalpradine"}) + "\n")
    with pytest.warns(UserWarning, match="cut from the left"):
        res = evaluate_benchmark(model, tok, data=f, kind="qa", max_new_tokens=4)
    assert len(res["_per_item"]["utility_long_qa"]["correct"]) == 1


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
    scores = res["_per_item"]["utility_huge"].get("scores")
    assert res["_per_item"]["utility_huge"]["predictions"][0] == res["_per_item"]["utility_huge"]["predictions"][1]
    if scores is not None:
        assert scores[0] == pytest.approx(scores[1], abs=1e-4)
    predictions = res_qa["_per_item"]["utility_huge_qa"]["predictions"]
    assert predictions[0] == predictions[1]


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
    ('{"question": "ab\\ud800", "answer": "b"}', "qa",
     "field 'question' holds a lone surrogate \\ud800 at character 3"),
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
    from obliviate.cli.main import main

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


# --------------------------------------------------------------------------- one line where torch / transformers raised

def one_error(capsys) -> str:
    return _one_error(capsys, max_len=400)



@pytest.mark.parametrize("override,message", [
    ("train.lr=.inf", "config key 'train.lr': must be a finite number, got inf"),
    ("train.lr=.nan", "config key 'train.lr': must be a finite number, got nan"),
    ("train.beta1=2", "config key 'train.beta1': must be in [0, 1), got 2.0"),
    ("train.weight_decay=-1", "config key 'train.weight_decay': must be >= 0, got -1.0"),
])
def test_training_values_torch_rejects_are_one_line_before_anything_runs(tmp_path, capsys, override, message):
    """torch's optimizer raised ``ValueError: Invalid beta parameter`` (a traceback) or trained on to a NaN
    model; ``lr=.inf`` reported a NaN loss term without naming lr."""
    from obliviate.cli.main import main

    out = tmp_path / "o"
    assert main(["pretrain", "--out", str(out), *SMALL_WORLD, override]) == 2
    assert message in one_error(capsys)
    assert not (out / "results.json").exists()


def test_an_absurd_d_model_is_one_line_before_anything_is_allocated(tmp_path, capsys):
    from obliviate.cli.main import main
    from obliviate.errors import ConfigError
    from obliviate.models.builders import tiny_llama

    with pytest.raises(ConfigError, match=r"^a model with d_model=1000000000000, n_layer=4, .* GiB of float32 "
                                          r"weights, more than this machine's .* GiB of memory$"):
        tiny_llama(300, d_model=10**12, n_head=4)
    out = tmp_path / "o"
    assert main(["pretrain", "--out", str(out), *SMALL_WORLD, "model.d_model=1048576"]) == 2
    assert "a model with d_model=1048576" in one_error(capsys)
    assert not (out / "results.json").exists()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tokenizer):
    from obliviate.models import save_model, tiny_llama

    root = tmp_path_factory.mktemp("limits_model")
    tok = tiny_tokenizer
    save_model(tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2), root / "model")
    tok.save_pretrained(str(root / "model"))
    return root / "model"


def _variant(model_dir, tmp_path, config=None, tokenizer_json=None):
    import shutil

    d = shutil.copytree(model_dir, tmp_path / "variant")
    if config:
        c = json.loads((d / "config.json").read_text())
        c.update(config)
        (d / "config.json").write_text(json.dumps(c))
    if tokenizer_json is not None:
        (d / "tokenizer.json").write_text(tokenizer_json)
    return d


@pytest.mark.parametrize("field,value,message", [
    ("hidden_size", "big", "'hidden_size' must be a positive integer, got 'big'"),
    ("num_hidden_layers", -1, "'num_hidden_layers' must be a positive integer, got -1"),
    ("num_hidden_layers", "2", "'num_hidden_layers' must be a positive integer, got '2'"),
    ("num_attention_heads", 0, "'num_attention_heads' must be a positive integer, got 0"),
    ("vocab_size", -5, "'vocab_size' must be a positive integer, got -5"),
    ("max_position_embeddings", 12.5, "'max_position_embeddings' must be a positive integer, got 12.5"),
    ("rms_norm_eps", "x", "'rms_norm_eps' must be a positive number, got 'x'"),
    ("hidden_act", 5, "a field of its config.json has the wrong type: Validation error for field 'hidden_act'"),
    ("tie_word_embeddings", "yes", "a field of its config.json has the wrong type"),
])
def test_a_config_field_of_the_wrong_type_or_a_negative_size_is_one_line(model_dir, tmp_path, capsys, field,
                                                                           value, message):
    """A string ``hidden_size`` was a StrictDataclassFieldValidationError traceback; ``num_hidden_layers: -1``
    loaded a model with no layers that then crashed in eval (``__len__() should return >= 0``); a negative
    ``vocab_size`` failed deep in torch."""
    from obliviate.cli.main import main

    d = _variant(model_dir, tmp_path, config={field: value})
    out = tmp_path / "o"
    assert main(["eval", "--model", str(d), "--out", str(out), "--no-progress", *SMALL_WORLD[:0],
                 "n_forget=3", "n_holdout=1", "n_retain=3", "n_general=3", "n_concept=2", "n_toxic=4"]) == 2
    line = one_error(capsys)
    assert message in line and str(d) in line
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("text,message", [
    ("{}", "tokenizer.json must be a JSON object with a 'model' object, got an object without a 'model' object"),
    ("[]", "tokenizer.json must be a JSON object with a 'model' object, got a JSON list"),
    ("null", "tokenizer.json must be a JSON object with a 'model' object, got null"),
    ('{"model": {}}', "KeyError: 'added_tokens'"),
])
def test_a_tokenizer_json_of_an_empty_object_or_array_is_one_line(model_dir, tmp_path, text, message):
    """``{}`` was a KeyError, ``[]`` a TypeError, ``null`` an AttributeError traceback inside transformers."""
    from obliviate.errors import ModelError
    from obliviate.models.load import load_tokenizer

    d = _variant(model_dir, tmp_path, tokenizer_json=text)
    with pytest.raises(ModelError) as e:
        load_tokenizer(d)
    assert str(e.value).startswith(f"cannot load tokenizer from {str(d)!r}: ") and message in str(e.value)


SMALL_WORLD_ONLY = [w.split(".", 1)[1] for w in SMALL_WORLD]


def test_a_full_disk_while_writing_the_world_names_the_file(tmp_path, capsys, monkeypatch):
    """``obliviate world`` printed ``[Errno 28] No space left on device`` without saying which file."""
    import errno
    import pathlib

    from obliviate.cli.main import main

    out = tmp_path / "w"
    (out / "world").mkdir(parents=True)
    (out / "world" / "world.json").symlink_to("/dev/full")  # was: a real ENOSPC from write(), no file name on it
    if not pathlib.Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    assert main(["world", "--out", str(out), *SMALL_WORLD_ONLY]) == 2
    # A run no longer writes through a link under --out (issue #27), so the link itself is refused, by name.
    assert one_error(capsys).startswith(f"obliviate: error: refusing to write {out / 'world' / 'world.json'}: it is "
                                        "a symbolic link (to /dev/full)")

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    out = tmp_path / "w2"
    assert main(["world", "--out", str(out), *SMALL_WORLD_ONLY]) == 2
    assert one_error(capsys) == f"obliviate: error: {out / 'world' / 'world.json'}: [Errno 28] No space left on device"


def test_ctrl_c_during_start_up_is_one_line_and_exit_130():
    """Ctrl-C while the commands were being imported (torch, transformers: seconds) was a traceback; inside
    ``main`` (here: while the parser is built) it is one line (before ``main``: the test below)."""
    import subprocess
    import sys

    code = ("import os, signal, sys\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with it ignored\n"
            "from obliviate.cli import main as cli\n"
            "real = cli.build_parser\n"
            "def interrupted():\n"
            "    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the parser is built\n"
            "    return real()\n"
            "cli.build_parser = interrupted\n"
            "sys.exit(cli.main(['methods']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "obliviate: interrupted" and "Traceback" not in r.stderr


def test_ctrl_c_while_the_command_modules_are_imported_is_one_line_and_exit_130():
    """The console script imports :mod:`obliviate.cli.main`, and with it every command module, before ``main``
    runs: Ctrl-C then is one line too."""
    import subprocess
    import sys

    code = ("import os, signal, sys\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "class CtrlC:  # Ctrl-C when torch is about to be imported (by the first command module)\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "        return None\n"
            "sys.meta_path.insert(0, CtrlC())\n"
            "from obliviate.cli.main import main  # what the console script does\n"
            "sys.exit(main(['methods']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "obliviate: interrupted" and "Traceback" not in r.stderr


# --------------------------------------------------------------------------- non-finite logits


@pytest.fixture(scope="module")
def overflowing_model_dir(tmp_path_factory, tiny_tokenizer):
    """Finite weights (they pass the load-time check) whose logits overflow to inf/NaN: the final norm's
    scale is 3e38, the largest float32 being 3.4e38."""
    from obliviate.models import save_model, tiny_llama

    d = tmp_path_factory.mktemp("overflow") / "model"
    model = tiny_llama(len(tiny_tokenizer), n_layer=2, d_model=32, n_head=2)
    with torch.no_grad():
        model.model.norm.weight.fill_(3e38)
    save_model(model, d)
    tiny_tokenizer.save_pretrained(str(d))
    return d


@pytest.mark.parametrize("kind", ["mcq", "qa", "world"])
def test_evaluation_refuses_non_finite_logits_with_status_invalid(overflowing_model_dir, tmp_path, capsys, kind):
    """Accuracies used to be computed from NaN logits (forget MCQ 0.89 -> 0.22, read as forgetting), with
    exit 0 and status complete. Now: one line, exit 2, results.json with status invalid, the error, no score."""
    from obliviate.cli.main import main

    out = tmp_path / "o"
    args = ["eval", "--model", str(overflowing_model_dir), "--out", str(out), "--no-progress"]
    if kind == "world":
        args += SMALL_WORLD_ONLY
    else:
        f = tmp_path / f"{kind}.jsonl"
        row = ({"question": "What is Morvexia treated with?", "choices": ["zalpradine", "moss"], "answer_index": 0}
               if kind == "mcq" else {"question": "What is Morvexia treated with?", "answer": "zalpradine"})
        f.write_text(json.dumps(row) + "\n")
        args += ["--data", str(f), "--kind", kind]
    assert main(args) == 2
    line = one_error(capsys)
    assert "the model's logits hold NaN or infinite values" in line
    r = json.loads((out / "results.json").read_text())
    assert r["status"] == "invalid" and "logits hold NaN or infinite values" in r["error"]
    assert r["metrics"] is None and "accuracy" not in json.dumps(r)


def test_check_logits_looks_at_real_positions_only():
    from obliviate.errors import InvalidResult
    from obliviate.eval.core import check_logits

    logits = torch.zeros(2, 3, 4)
    logits[1, 2] = float("nan")  # a padded position
    check_logits(logits, torch.tensor([[1, 1, 1], [1, 1, 0]]))
    with pytest.raises(InvalidResult, match=r"logits hold NaN or infinite values \(here\)"):
        check_logits(logits, where="here")


def test_an_invalid_result_is_written_only_into_a_directory_this_process_prepared(tmp_path):
    from obliviate.runs.results import prepare_out_dir, write_invalid_results

    assert write_invalid_results(tmp_path / "elsewhere", "x") is None and not (tmp_path / "elsewhere").exists()
    out = prepare_out_dir(tmp_path / "run")
    path = write_invalid_results(out, "the model's logits hold NaN")
    assert json.loads(path.read_text())["status"] == "invalid"
