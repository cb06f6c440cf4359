"""Issue #42, "one validation boundary": every user-facing value passes obliviate.cli.inputs.check_inputs (and
the config, schema and reader layers it calls) before anything runs. Each kind of bad input the issue names has
a test here, a property-based test fuzzes the boundary through the real entry point, and SIGTERM is handled as
Ctrl-C is."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obliviate.cli import compare as cli_compare
from obliviate.cli import eval as cli_eval
from obliviate.cli import inputs as cli_inputs
from obliviate.cli.main import main
from obliviate.pipelines import evaluate as eval_pipeline
from obliviate.pipelines import unlearn as unlearn_pipeline
from obliviate.pipelines.compare import run as compare_pipeline
from obliviate.tasks.sources._io import iter_text_lines

from _cli_errors import SMALL_WORLD


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny saved model and a forget and a retain file of QA pairs."""
    from obliviate.models import save_model
    from obliviate.models.builders import tiny_llama
    from obliviate.models.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("inputs")
    tok = train_tokenizer(["Question: What is Morvexia treated with?\nAnswer: zalpradine."] * 20, vocab_size=300)
    save_model(tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0), root / "model", tok)
    for name in ("forget", "retain"):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"question": f"q{i} {name}?", "answer": f"a{i}"}) + "\n"
                                                    for i in range(4)))
    return root


class Reached(BaseException):
    """Raised where a command would load a model or prepare --out: every check before it passed."""


@pytest.fixture
def stop_at_the_model(monkeypatch):
    def reached(*a, **k):
        raise Reached()

    for module in (cli_eval, cli_inputs, cli_compare):  # (unlearn and tune load through cli.inputs.checked_run)
        monkeypatch.setattr(module, "load_model_args", reached)
    for module in (eval_pipeline, unlearn_pipeline, compare_pipeline):  # where each command prepares --out
        monkeypatch.setattr(module, "prepare_out_dir", reached)


def run(argv, capsys):
    """(status, stderr) of ``main(argv)``: "reached" when every check passed and the command came to the model."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    except Reached:
        rc = "reached"
    return rc, capsys.readouterr().err


def snapshot(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- each kind, named


@pytest.mark.parametrize("argv_tail,message", [
    (["seed=-5"], "config key 'seed': a seed must be an integer in [0, 2**32)"),
    (["seed=4294967296"], "config key 'seed': a seed must be an integer in [0, 2**32)"),
    (["world.seed=-1"], "config key 'world.seed': a seed must be an integer in [0, 2**32)"),
    (["--limit", "0"], "argument --limit: expected an integer >= 1, got '0'"),
    (["--limit", "1e3"], "argument --limit: expected an integer >= 1, got '1e3'"),
    (["--batch-size", "-2"], "argument --batch-size: expected an integer >= 1, got '-2'"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: expected an integer >= 1"),
])
def test_numbers_out_of_range_are_one_line(inputs, tmp_path, capsys, stop_at_the_model, argv_tail, message):
    """Seeds in any config (a key ``seed`` or ``*_seed``, world.seed too: a negative one ran with exit 0) and counts
    given as options (checked by argparse, whose errors are now one line)."""
    rc, err = run(["eval", "--model", str(inputs / "model"), "--out", str(tmp_path / "o"), *argv_tail], capsys)
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 2 and len(lines) == 1 and message in lines[0], err


def test_probe_strength_must_be_finite_and_positive(inputs, tmp_path, capsys):
    for bad in ("nan", "inf", "-1", "0"):
        rc, err = run(["probe-directions", "--model", str(inputs / "model"), "--out", str(tmp_path / "o"),
                       "--C", bad], capsys)
        assert rc == 2 and "argument --C: expected a finite number > 0" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("spec,message", [
    ("name: 5\nforget: forget.jsonl\n", "'name' must be a string, got 5"),
    ("auto_evals: sometimes\nforget: forget.jsonl\n", "'auto_evals' must be true or false, got 'sometimes'"),
    ("prompt: {chat: maybe}\nforget: forget.jsonl\n", "'prompt.chat' must be true or false, got 'maybe'"),
    ("prompt: 5\nforget: forget.jsonl\n", "'prompt' must be a mapping, got 5"),
    ("forget: [{path: forget.jsonl, group: 5}]\n", "forget.jsonl: 'group' must be a string, got 5"),
    ("forget: [{path: forget.jsonl, role: sideways}]\n", "'role' must be one of forget, retain"),
    ("forget: forget.jsonl\nbogus: 1\n", "'bogus' is not a known key (valid: auto_evals, evals, forget"),
])
def test_a_task_spec_value_of_the_wrong_type_is_one_line(inputs, tmp_path, capsys, stop_at_the_model, spec,
                                                          message):
    """A task spec passes its pydantic schema (obliviate.tasks.files.TaskSpec): `name: 5`, `auto_evals: sometimes`
    (ran, truthy), `prompt: {chat: maybe}` (blamed the tokenizer's chat template) were not refused."""
    f = inputs / "spec.yaml"
    f.write_text(spec)
    rc, err = run(["eval", "--model", str(inputs / "model"), "--out", str(tmp_path / "o"), "--task", f"file:{f}"],
                  capsys)
    assert rc == 2 and message in one_error_text(err), err


def one_error_text(err: str) -> str:
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("obliviate: error: "), err
    return lines[0]


@pytest.mark.parametrize("flag,message", [
    ("--forget", "--forget file DIR is a directory, not a file"),
    ("--config", "config file DIR is a directory, not a file"),
    ("--task", "task spec DIR is a directory, not a file"),
    ("--tokenizer", "tokenizer path 'FILE' is not a directory"),
    ("--model", "model path 'FILE' is not a directory"),
])
def test_a_path_of_the_wrong_kind_is_named_as_such(inputs, tmp_path, capsys, flag, message):
    """A directory where a file goes said "file not found"; a file given as --model blamed the tokenizer."""
    d, f = tmp_path / "d", inputs / "forget.jsonl"
    d.mkdir()
    argv = ["eval", "--model", str(inputs / "model"), "--out", str(tmp_path / "o")]
    value = {"--forget": str(d), "--config": str(d), "--task": f"file:{d}", "--tokenizer": str(f),
             "--model": str(f)}[flag]
    argv += [flag, value] + (["--retain", str(inputs / "retain.jsonl")] if flag == "--forget" else [])
    rc, err = run(argv, capsys)
    assert rc == 2 and message.replace("DIR", str(d)).replace("FILE", str(f)) in one_error_text(err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("patch,message", [
    ({"eos_token_id": 5000}, "'eos_token_id' = 5000 contradicts 'vocab_size' = 300: a token id must be in [0, 300)"),
    ({"eos_token_id": [2, 999]}, "'eos_token_id' = [2, 999] contradicts 'vocab_size' = 300"),
    ({"pad_token_id": -7}, "'pad_token_id' must be a token id >= 0, got -7"),
    ({"bos_token_id": "one"}, "'bos_token_id' must be a token id (an integer) or a list of them, got 'one'"),
])
def test_a_model_config_that_contradicts_itself_fails_before_the_weights(inputs, tmp_path, capsys, monkeypatch,
                                                                         patch, message):
    """Special-token ids outside the vocabulary (eval ran with exit 0) or of the wrong type (blamed the tokenizer):
    refused from config.json alone, before the tokenizer or any weight is read."""
    import obliviate.models.load as load

    model = tmp_path / "model"
    shutil.copytree(inputs / "model", model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, **patch}))
    monkeypatch.setattr(load, "_weights_only", lambda *a: pytest.fail("weights were read"))
    rc, err = run(["eval", "--model", str(model), "--out", str(tmp_path / "o"), "--data",
                   str(inputs / "forget.jsonl"), "--kind", "qa"], capsys)
    assert rc == 2 and message in one_error_text(err) and str(model) in err


@pytest.mark.parametrize("raw", [
    b'{"question": "a?", "answer": "b"}\r{"question": "c?", "answer": "d"}\r',  # classic Mac
    b'{"question": "a?", "answer": "b"}\r\n\r\n{"question": "c?", "answer": "d"}\r\n',  # Windows, an empty line
    b'\xef\xbb\xbf{"question": "a?", "answer": "b"}\n\n{"question": "c?", "answer": "d"}',  # BOM, no final newline
    b'\xef\xbb\xbf{"question": "a?", "answer": "b"}\r\n{"question": "c?", "answer": "d"}\r',  # mixed
])
@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_unusual_line_endings_read_as_lines(raw, suffix, tmp_path):
    """A lone CR ended no line: a JSONL file was "invalid JSON (Extra data)", a CSV "new-line character seen in
    unquoted field". Every reader gets lines ending in \\n, counted once per ending."""
    from obliviate.tasks.sources.generic import load_records

    if suffix == ".csv":
        raw = raw.replace(b'{"question": "a?", "answer": "b"}', b"question,answer\r\na?,b", 1) \
                 .replace(b'{"question": "c?", "answer": "d"}', b"c?,d")
    f = tmp_path / f"f{suffix}"
    f.write_bytes(raw)
    recs = load_records(f, kind="qa")
    assert [(r.question, r.answer) for r in recs] == [("a?", "b"), ("c?", "d")]
    assert all(line.endswith("\n") and "\r" not in line for _, line in iter_text_lines(f, f.name)
               if line != list(iter_text_lines(f, f.name))[-1][1])


def test_a_text_file_with_lone_cr_is_one_text_per_line(tmp_path):
    from obliviate.tasks.sources.generic import load_records

    f = tmp_path / "t.txt"
    f.write_bytes(b"line one\rline two\r\rline three")
    assert [r.text for r in load_records(f, kind="text", split_by="line")] == ["line one", "line two", "line three"]
    assert [n for n, _ in iter_text_lines(f, f.name)] == [1, 2, 3, 4]


# --------------------------------------------------------------------------- the fuzz test

KEYS = st.sampled_from(["seed", "eval.batch_size", "eval.max_new_tokens", "world.seed", "world.n_forget",
                        "unlearn.batch_size", "unlearn.max_len", "unlearn.train.lr", "unlearn.train.steps",
                        "unlearn.params.beta", "unlearn.params", "unlearn.seed", "methods", "runs.npo.lr",
                        "runs.npo.train.lr", "runs.npo.params.beta", "eval", "world"]) \
    | st.text(alphabet="abnz._-[]", min_size=1, max_size=10)
SCALARS = st.one_of(st.integers(-2**70, 2**70), st.floats(), st.booleans(), st.none(),
                    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12))
VALUES = st.one_of(SCALARS.map(str), SCALARS.map(json.dumps), st.sampled_from([".nan", "-.inf", "1e999", "[1, -2]",
                                                                              "{a: 1}", "", "~", "0x10", "1_000"]))
OVERRIDES = st.lists(st.builds(lambda k, v: f"{k}={v}", KEYS, VALUES), max_size=3)
CHUNKS = st.sampled_from([b'{"question": "q?", "answer": "a"}', b'{"text": "t"}', b"question,answer", b"q?,a", b"\r",
                          b"\n", b"\r\n", b"\xef\xbb\xbf", b"\xff", b"{", b'"', b",", b"[", b"]", b"null", b"\x00"])
FILE_BYTES = st.lists(CHUNKS, max_size=8).map(b"".join)
SPEC = st.dictionaries(st.sampled_from(["name", "prompt", "forget", "retain", "evals", "auto_evals", "bogus"]),
                       st.one_of(SCALARS, st.just("forget.jsonl"), st.lists(SCALARS, max_size=2),
                                 st.fixed_dictionaries({}, optional={"path": st.just("forget.jsonl"),
                                                                     "kind": SCALARS, "group": SCALARS,
                                                                     "template": SCALARS, "chat": SCALARS})),
                       max_size=4)
OPTIONS = st.lists(st.sampled_from(["--limit", "--batch-size", "--seed", "--max-new-tokens"]).flatmap(
    lambda f: st.tuples(st.just(f), st.one_of(st.integers(-3, 3).map(str), st.sampled_from(["1e3", "nan", ""]),
                                             st.integers(-2**70, 2**70).map(str)))), max_size=2)
TOKEN_IDS = st.dictionaries(st.sampled_from(["bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"]),
                            st.one_of(st.integers(-5, 400), st.lists(st.integers(-1, 400), max_size=2), SCALARS),
                            max_size=2)


ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r", b"\n\n", b"\r\n\r\n", b""])
QA_LINES = st.lists(st.tuples(st.sampled_from([b'{"question": "q?", "answer": "a"}', b'{"prompt": "q?", "target": "a"}',
                                               b'{"text": "t"}']), ENDINGS).map(lambda t: t[0] + t[1]),
                    min_size=1, max_size=4).map(b"".join)
DATA = st.tuples(st.sampled_from([b"", b"\xef\xbb\xbf"]), st.one_of(QA_LINES, FILE_BYTES)).map(b"".join)
FAULTS = ("none", "overrides", "options", "data", "spec", "config", "model")


@settings(max_examples=150, deadline=5000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(command=st.sampled_from(["eval", "unlearn", "compare"]), fault=st.sampled_from(FAULTS), draw=st.data())
def test_fuzzed_inputs_are_one_line_or_accepted_and_never_change_a_file(
        inputs, tmp_path_factory, capsys, stop_at_the_model, command, fault, draw):
    """One input at a time made random (the others valid): override keys and values, option values, data file
    bytes (line endings, BOM, empty lines, bad UTF-8, broken JSON), task specs, YAML configs and config.json token
    ids, through ``main``: exit 2 with one line on stderr, or every check passed (the command came to the
    model), never a traceback or a hang; no input file changes."""
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copy(inputs / "forget.jsonl", root / "forget.jsonl")
    shutil.copy(inputs / "retain.jsonl", root / "retain.jsonl")
    shutil.copytree(inputs / "model", root / "model")
    if fault == "model":
        cfg = json.loads((root / "model" / "config.json").read_text())
        (root / "model" / "config.json").write_text(json.dumps({**cfg, **draw.draw(TOKEN_IDS)}))
    suffix = draw.draw(st.sampled_from([".jsonl", ".csv", ".txt", ".json"])) if fault == "data" else ".jsonl"
    data = draw.draw(DATA) if fault == "data" else (inputs / "forget.jsonl").read_bytes()
    if suffix == ".csv" and data[:3] != b"\xef\xbb\xbf" and draw.draw(st.booleans()):
        data = b"question,answer" + draw.draw(ENDINGS) + b"q?,a" + draw.draw(ENDINGS)
    (root / f"data{suffix}").write_bytes(data)
    argv = [command, "--out", str(root / "out"), "--no-progress"]
    argv += ["--model", str(root / "model")] if command != "compare" else []
    argv += ["--method", "npo"] if command == "unlearn" else []
    if fault == "spec":
        (root / "spec.yaml").write_text(yaml.safe_dump(draw.draw(SPEC)))
        argv += ["--task", f"file:{root / 'spec.yaml'}"]
    else:
        argv += ["--forget", str(root / f"data{suffix}"), "--retain", str(root / "retain.jsonl")]
    if fault == "config":
        (root / "config.yaml").write_text(yaml.safe_dump(draw.draw(st.dictionaries(KEYS, SCALARS, max_size=2))))
        argv += ["--config", str(root / "config.yaml")]
    for flag, value in draw.draw(OPTIONS) if fault == "options" else []:
        if not (command == "compare" and flag in ("--batch-size", "--max-new-tokens")):
            argv += [f"{flag}={value}"]
    if fault == "overrides":
        argv += [o for o in draw.draw(OVERRIDES) if command != "compare" or not o.startswith("eval")]
    before = snapshot(root)
    started = time.monotonic()
    rc, err = run(argv, capsys)
    assert time.monotonic() - started < 5
    assert "Traceback" not in err
    assert rc in (2, "reached"), (rc, err)
    if rc == 2:
        lines = [l for l in err.splitlines() if l.strip()]
        assert len(lines) == 1 and "error: " in lines[0], err
    assert snapshot(root) == before  # (--out is never made: the command stops at the model or before)


# --------------------------------------------------------------------------- SIGTERM


@pytest.mark.heavy(23)
def test_sigterm_is_one_line_releases_the_lock_and_the_run_resumes(tmp_path):
    """`kill PID` mid-training (was Python's default: the process died without a word): one line, status 143, the
    lock free at once, the checkpoints kept; the rerun resumes from the last one and finishes."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "obliviate.cli.main", "pretrain", "--out", str(out), "--no-progress",
            *SMALL_WORLD, "model.size=nano", "model.vocab_size=400", "batch_size=4", "train.log_every=1",
            "qa_batch_size=8", "train.steps=30", "train.checkpoint_every=5", "train.keep_checkpoints=2"]
    env = {**os.environ, "OBLIVIATE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ckpts, deadline = out / "checkpoints", time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if ckpts.exists() and any(p.name.startswith("step_") for p in ckpts.iterdir()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    lines = [l for l in err.splitlines() if l.strip()]
    assert proc.returncode == 143 and lines[-1] == "obliviate: terminated (SIGTERM)" and "Traceback" not in err, err
    assert not (out / "results.json").exists()
    with open(out / ".obliviate.lock", "a+") as f:  # released: another process takes it at once
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(f, fcntl.LOCK_UN)
    kept = max(int(p.name[5:]) for p in ckpts.iterdir() if p.name.startswith("step_"))
    assert kept >= 5
    log = out / "metrics.jsonl"
    first, *rest = log.read_text().splitlines()
    marked = json.dumps({**json.loads(first), "mark": 1})  # a run from step 0 deletes the log; a resumed one keeps it
    log.write_text("\n".join([marked, *rest]) + "\n")
    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and "starting afresh" not in rerun.stderr, rerun.stderr
    assert json.loads((out / "results.json").read_text())["status"] == "complete"
    assert log.read_text().splitlines()[0] == marked  # resumed from the checkpoint, not restarted
