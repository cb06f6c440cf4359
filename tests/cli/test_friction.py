"""Issue #42, "Friction worth removing": what a careful new user hit on data of their own, each fixed and held
here (the tests need no model run but the ones that evaluate a tiny random Llama)."""

import json
import logging
import warnings
from pathlib import Path

import pytest
from transformers.utils import logging as hf_logging

import obliviate
from obliviate.cli.inputs import mapping_from_args, task_from_args
from obliviate.cli import main as cli_main
from obliviate.cli.main import build_parser, log_to_stderr, main, quiet_libraries
from obliviate.errors import ConfigError
from obliviate.pipelines.sequential import read_requests
from obliviate.tasks.benchmark import benchmark_task

from tests._cli_errors import one_error
from tests._run_dirs import tiny_model_dir


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def two_schemas(tmp_path):
    """A forget file whose answer field is ``true_answer`` (no name obliviate knows) and a retain file with
    ``question``/``answer``: one mapping for both cannot read them."""
    forget = _jsonl(tmp_path / "forget.jsonl", [{"prompt": f"Who is F{i}?", "true_answer": f"f{i}"} for i in range(3)])
    retain = _jsonl(tmp_path / "retain.jsonl", [{"question": f"Who is R{i}?", "answer": f"r{i}"} for i in range(3)])
    return tmp_path, forget, retain


def _task(argv):
    return task_from_args(build_parser().parse_args(["unlearn", "--method", "npo", "--model", "m", "--out", "o",
                                                     *argv]))


def test_mapping_per_file_on_the_command_line(two_schemas):
    root, forget, retain = two_schemas
    # the old way: one mapping for every file
    with pytest.raises(Exception, match="retain.jsonl line 1: missing field 'prompt'"):
        _task(["--forget", forget, "--retain", retain, "--mapping", "question=prompt,answer=true_answer"])
    for key in (forget, "forget.jsonl", "forget"):  # the path, the file's name, or its set
        task = _task(["--forget", forget, "--retain", retain, "--mapping", f"{key}=question=prompt,answer=true_answer"])
        assert task.forget.qa == [(f"Who is F{i}?", f"f{i}") for i in range(3)]
        held = [(x["question"], x["answer"]) for es in task.evals if es.name == "retain_heldout_qa" for x in es.items]
        # (issue #42's held-out share)
        assert sorted(task.retain.qa + held) == [(f"Who is R{i}?", f"r{i}") for i in range(3)]
    # a common mapping for every file, and the retain file's own
    other = _jsonl(root / "other.jsonl", [{"q": "Who is O?", "a": "o"}])
    task = _task(["--forget", forget, "--retain", other, "--mapping", "question=prompt,answer=true_answer",
                  "--mapping", "other.jsonl=question=q,answer=a"])
    assert task.forget.qa[0] == ("Who is F0?", "f0") and task.retain.qa == [("Who is O?", "o")]


def test_mapping_per_file_names_a_file_that_is_not_given(two_schemas):
    _, forget, retain = two_schemas
    with pytest.raises(ConfigError, match="'retian.jsonl' is neither a file given .* nor a set given"):
        _task(["--forget", forget, "--retain", retain, "--mapping", "retian.jsonl=question=q,answer=a"])
    with pytest.raises(ConfigError, match="both apply to every file"):
        mapping_from_args(["question=q", "answer=a"], {"forget": [forget]})
    with pytest.raises(ConfigError, match="bad field mapping"):
        mapping_from_args(["forget=question="], {"forget": [forget]})
    assert mapping_from_args(["question=q"], {"forget": [forget]}) == "question=q"  # one for all: as before
    assert mapping_from_args(["retain=question=q"], {"forget": [forget], "retain": [retain]}) == {retain: "question=q"}


def test_cannot_tell_hint_shows_the_command_line_syntax(two_schemas, capsys):
    root, forget, _ = two_schemas
    odd = _jsonl(root / "odd.jsonl", [{"foo": "x", "bar": "y"}])
    model = tiny_model_dir(root)  # a valid model directory: the boundary checks it first (issue #42)
    assert main(["eval", "--model", str(model), "--forget", forget, "--retain", odd,
                 "--mapping", "forget=question=prompt,answer=true_answer", "--out", str(root / "out")]) == 2
    line = one_error(capsys)
    assert "odd.jsonl line 1: cannot tell" in line and "--mapping odd.jsonl=question=FIELD,answer=FIELD" in line
    assert "{path:" not in line  # the spec's syntax is for specs
    assert main(["eval", "--model", str(root / "no_model"), "--forget", forget, "--retain", odd, "--out",
                 str(root / "out"), "--mapping", "forget=question=prompt,answer=true_answer",
                 "--mapping", "odd.jsonl=question=foo,answer=bar"]) == 2
    assert "model directory" in one_error(capsys)  # the files are read now; the model is what is missing


def test_a_mistyped_model_path_is_named_as_the_model(two_schemas, capsys):
    root, forget, retain = two_schemas
    for cmd in (["eval"], ["unlearn", "--method", "npo"]):
        assert main([*cmd, "--model", str(root / "modle"), "--forget", forget, "--retain", retain, "--out",
                     str(root / "out"), "--mapping", "forget=question=prompt,answer=true_answer"]) == 2
        line = one_error(capsys)
        assert f"model directory '{root / 'modle'}' does not exist" in line and "tokenizer" not in line
    assert not (root / "out").exists()


def test_a_mistyped_model_name_that_could_be_a_hub_id_is_named_as_the_model(two_schemas, monkeypatch, capsys):
    import transformers

    root, forget, retain = two_schemas
    monkeypatch.chdir(root)

    def offline(name, *a, **kw):
        raise OSError(f"We couldn't connect to 'https://huggingface.co' to load the files of {name}.")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    assert main(["eval", "--model", "runs/bsae", "--forget", forget, "--retain", retain, "--out", "out",
                 "--mapping", "forget=question=prompt,answer=true_answer"]) == 2
    line = one_error(capsys)
    assert "no local directory 'runs/bsae', and no hub model 'runs/bsae' could be loaded" in line, line


def test_mapping_per_file_for_sequential_requests(two_schemas):
    _, forget, retain = two_schemas
    mapping = mapping_from_args(["forget.jsonl=question=prompt,answer=true_answer"], {"forget": [forget, retain]})
    requests = read_requests([Path(forget), Path(retain)], mapping=mapping)
    assert requests[0].data.qa[0] == ("Who is F0?", "f0") and requests[1].data.qa[0] == ("Who is R0?", "r0")


def test_a_method_parameter_typo_is_named_as_typed(two_schemas, tiny_model, tiny_tokenizer, capsys):
    root, forget, retain = two_schemas
    files = ["--forget", forget, "--retain", retain, "--mapping", "forget=question=prompt,answer=true_answer"]
    m = tiny_model_dir(root)  # a valid model directory: the boundary checks it first (issue #42)
    assert main(["unlearn", "--method", "npo", "--model", str(m), *files, "--out", str(root / "o"),
                 "unlearn.params.alpah=1"]) == 2
    assert "unknown config key 'unlearn.params.alpah' (known: alpha, beta, gamma, retain)" in one_error(capsys)
    assert main(["compare", "--model", str(m), *files, "--out", str(root / "o"), "methods=[npo]",
                 "runs.npo.params.alpah=1"]) == 2
    assert "unknown config key 'runs.npo.params.alpah'" in one_error(capsys)
    task = obliviate.load_task(forget=forget, retain=retain, mapping={"forget": "question=prompt,answer=true_answer"})
    with pytest.raises(ConfigError, match=r"^unknown config key 'params\.alpah'"):
        obliviate.unlearn(tiny_model, tiny_tokenizer, task, "npo", params={"alpah": 1})
    with pytest.raises(ConfigError, match=r"^unknown config key 'stpes'"):
        obliviate.unlearn(tiny_model, tiny_tokenizer, task, "npo", stpes=1)
    assert not (root / "o").exists()


def test_one_file_has_one_set_name_by_data_or_by_spec(tmp_path):
    csv = tmp_path / "medqa200.csv"
    csv.write_text("question,A,B,answer\nWhich drug?,zalpradine,moss,0\nWhich cave?,cold,warm,1\n")
    mapping = "question=question,choices=A+B,answer_index=answer"
    by_data = benchmark_task(data=csv, kind="mcq", mapping=mapping)
    forget = _jsonl(tmp_path / "f.jsonl", [{"question": "q", "answer": "a"}])
    by_files = obliviate.load_task(forget=forget, utility=str(csv), mapping={str(csv): mapping})
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"forget: f.jsonl\nutility: [{{path: medqa200.csv, kind: mcq, mapping: '{mapping}'}}]\n")
    by_spec = obliviate.load_task(f"file:{spec}")
    names = {t.evals[-1].name for t in (by_data, by_files, by_spec)}
    assert names == {"utility_medqa200"} and {t.evals[-1].role for t in (by_data, by_files, by_spec)} == {"utility"}
    # a name given is the name, either way
    assert benchmark_task("medqa", data=csv, kind="mcq", mapping=mapping).evals[0].name == "medqa"
    spec.write_text(f"forget: f.jsonl\nutility: [{{path: medqa200.csv, name: medqa, mapping: '{mapping}'}}]\n")
    assert obliviate.load_task(f"file:{spec}").evals[-1].name == "medqa"


def test_predictions_json_holds_one_record_per_item(tmp_path, capsys):
    model = tiny_model_dir(tmp_path)
    forget = _jsonl(tmp_path / "forget.jsonl", [{"question": f"Where does Ka{i} live?", "answer": "Velmora"}
                                                for i in range(3)])
    mcq = _jsonl(tmp_path / "quiz.jsonl", [{"question": "Which city?", "choices": ["Velmora", "Ostrand", "Karith"],
                                            "answer_index": 2}])
    out = tmp_path / "o"
    assert main(["eval", "--model", str(model), "--forget", forget, "--utility", mcq, "--out", str(out),
                 "--no-progress", "--max-new-tokens", "3"]) == 0
    preds = json.loads((out / "predictions.json").read_text())
    metrics = json.loads((out / "results.json").read_text())["metrics"]["model"]
    assert set(preds) == {"forget_qa", "utility_quiz"}
    qa = preds["forget_qa"]
    assert [r["input"] for r in qa] == [f"Where does Ka{i} live?" for i in range(3)]
    assert all(r["gold"] == "Velmora" and r["prompt"] == f"Question: {r['input']}\nAnswer:" for r in qa)
    assert all(isinstance(r["prediction"], str) and r["score"] in (0.0, 1.0) for r in qa)
    assert sum(r["score"] for r in qa) / 3 == pytest.approx(metrics["forget_qa_em"])
    (m,) = preds["utility_quiz"]
    assert m["input"] == "Which city?" and m["gold"] == "Karith" and m["gold_index"] == 2
    assert m["prediction"] == m["choices"][m["prediction_index"]]
    assert m["score"] == float(m["prediction_index"] == 2) == metrics["utility_quiz_acc"]


def test_the_api_logs_and_never_prints(two_schemas, tiny_model, tiny_tokenizer, capsys, caplog):
    """``obliviate.unlearn`` said its outcome (and its warnings) with print; it logs them now, and the command
    line shows the same records as its ``obliviate: ...`` lines."""
    _, forget, retain = two_schemas
    task = obliviate.load_task(forget=forget, retain=[retain, forget],
                               mapping={"forget": "question=prompt,answer=true_answer",
                                        forget: "question=prompt,answer=true_answer"})
    caplog.set_level("INFO", logger="obliviate")
    _, info = obliviate.unlearn(tiny_model, tiny_tokenizer, task, "npo", train={"steps": 1}, batch_size=2,
                                allow_overlap=True)  # the forget pairs are in the retain data too: a warning
    assert capsys.readouterr() == ("", "")
    said = {(r.name, r.levelname, r.getMessage()) for r in caplog.records}
    assert ("obliviate.api", "INFO", info["outcome"]["line"]) in said
    assert any(level == "WARNING" and "are also in the retain data" in msg for _, level, msg in said)


def test_the_command_line_shows_the_librarys_log_records(capsys):
    logger = logging.getLogger("obliviate.test")
    with log_to_stderr():
        logger.warning("the base model does not know %s", "the forget set")
        logger.info("documents were split")
    logger.info("after the command: not shown")
    assert capsys.readouterr().err == ("obliviate: warning: the base model does not know the forget set\n"
                                       "obliviate: documents were split\n")


def test_progress_bars_only_on_a_terminal(tmp_path, monkeypatch, capsys):
    model = tiny_model_dir(tmp_path)
    forget = _jsonl(tmp_path / "forget.jsonl", [{"question": f"Where does Ka{i} live?", "answer": "Velmora"}
                                                for i in range(3)])
    argv = ["eval", "--model", str(model), "--forget", forget, "--max-new-tokens", "2"]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "piped")]) == 0  # stderr captured: not a terminal
    err = capsys.readouterr().err
    assert "it/s" not in err and "\r" not in err and "generating" not in err, err
    monkeypatch.setattr(cli_main, "stderr_is_terminal", lambda: True)
    assert main([*argv, "--out", str(tmp_path / "terminal")]) == 0
    assert "generating" in capsys.readouterr().err  # the bars, where someone watches them


def test_library_noise_is_silenced_and_the_runs_warnings_kept():
    hf_level = hf_logging.get_verbosity()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_libraries():
            warnings.warn("`is_gradient_checkpointing` is deprecated", FutureWarning)
            warnings.warn_explicit("a notice", UserWarning, "modeling_utils.py", 1,
                                   module="transformers.modeling_utils")
            warnings.warn("greedy_generate: 1 of 2 prompts were cut from the left to 256 tokens", UserWarning)
            assert hf_logging.get_verbosity() == logging.ERROR  # "Token indices sequence length ..." and the like
    assert [str(w.message) for w in seen] == ["greedy_generate: 1 of 2 prompts were cut from the left to 256 tokens"]
    assert hf_logging.get_verbosity() == hf_level
