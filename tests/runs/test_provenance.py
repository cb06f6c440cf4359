"""Issue #56, item 10: results.json and every model card a run writes name each data file the run read (the
forget, retain, holdout ... files, a task spec and the files it lists, eval's --data, unlearn's --requests), by
absolute path with its SHA-256, on the command line and through the Python API."""

import hashlib
import json
import shutil

import yaml

import obliviate
from obliviate.cli.main import main
from obliviate.models.load import load_model_and_tokenizer
from obliviate.runs.cache import task_fingerprint
from obliviate.runs.card import read_model_card
from obliviate.runs.results import task_digest

from tests._run_dirs import tiny_model_dir
from tests.tasks._userdata import write_user_files


def _record(path) -> dict:
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _inputs(out) -> list[dict]:
    return json.loads((out / "results.json").read_text())["inputs"]


def test_unlearn_records_its_files_in_results_and_the_card(tmp_path, monkeypatch):
    """Relative paths given from the data's directory: results.json and the card list each file once, absolute,
    with the SHA-256 of its bytes; the card's Markdown lists them too."""
    paths = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    model = tiny_model_dir(tmp_path)
    monkeypatch.chdir(tmp_path / "data")
    assert main(["unlearn", "--no-progress", "--method", "gradascent", "--model", str(model), "--forget",
                 "forget.jsonl", "--retain", "retain.csv", "--holdout", "retain_docs.txt", "--relearn", "related.txt",
                 "--out", str(tmp_path / "run"), "unlearn.train.steps=1", "eval.max_new_tokens=2"]) == 0
    want = [_record(paths[k]) for k in ("forget", "relearn", "retain_qa", "retain_docs")]
    assert _inputs(tmp_path / "run") == sorted(want, key=lambda r: r["path"])
    assert read_model_card(tmp_path / "run" / "model")["obliviate"]["inputs"] == _inputs(tmp_path / "run")
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert all(f"- `{r['path']}`, SHA-256 `{r['sha256']}`" in card for r in want)


def test_a_spec_eval_data_and_requests_are_recorded(tmp_path, monkeypatch):
    """A task spec (the spec file and every file it lists) and the --config file, eval --data, and unlearn
    --requests (each request file and the retain file); an edited file is recorded with its new hash."""
    paths = write_user_files(tmp_path / "data", n_forget=8, n_retain=4)
    model = tiny_model_dir(tmp_path)
    spec = tmp_path / "data" / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "mine", "forget": ["forget.jsonl"], "retain": ["retain.csv"],
                                    "evals": [{"path": "utility_mcq.json", "role": "utility"}]}))
    (tmp_path / "run.yaml").write_text("eval:\n  max_new_tokens: 2\n")
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--no-progress", "--model", str(model), "--task", "file:data/spec.yaml", "--out", "spec",
                 "--config", "run.yaml"]) == 0
    want = [_record(p) for p in (paths["forget"], paths["retain_qa"], spec, paths["utility"], tmp_path / "run.yaml")]
    assert _inputs(tmp_path / "spec") == sorted(want, key=lambda r: r["path"])
    assert main(["eval", "--no-progress", "--model", str(model), "--data", "data/utility_mcq.json", "--kind", "mcq",
                 "--out", "ev", "--mapping", "question=stem,choices=options,answer=label"]) == 0
    assert _inputs(tmp_path / "ev") == [_record(paths["utility"])]
    lines = paths["forget"].read_text().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[4:]) + "\n")
    assert main(["unlearn", "--no-progress", "--method", "gradascent", "--model", str(model), "--requests",
                 "a.jsonl,b.jsonl", "--retain", "data/retain.csv", "--out", "seq", "unlearn.train.steps=1",
                 "eval.max_new_tokens=2"]) == 0
    want = [_record(p) for p in (tmp_path / "a.jsonl", tmp_path / "b.jsonl", paths["retain_qa"])]
    assert _inputs(tmp_path / "seq") == sorted(want, key=lambda r: r["path"])
    assert read_model_card(tmp_path / "seq" / "model")["obliviate"]["inputs"] == _inputs(tmp_path / "seq")
    paths["utility"].write_text(paths["utility"].read_text().replace("Which", "What"))
    assert main(["eval", "--no-progress", "--model", str(model), "--data", "data/utility_mcq.json", "--kind", "mcq",
                 "--out", "ev", "--mapping", "question=stem,choices=options,answer=label"]) == 0
    assert _inputs(tmp_path / "ev") == [_record(paths["utility"])]
    assert _inputs(tmp_path / "ev" / "previous") != _inputs(tmp_path / "ev")


def test_the_api_records_the_files_its_task_was_built_from(tmp_path, monkeypatch):
    """obliviate.load_task keeps the files it read with the task (relative paths made absolute), and a run into
    out_dir writes them to results.json and the card, with no command line around it."""
    paths = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    model, tok = load_model_and_tokenizer(str(tiny_model_dir(tmp_path)))
    monkeypatch.chdir(tmp_path / "data")
    task = obliviate.load_task(forget="forget.jsonl", retain=["retain.csv"])
    want = sorted([_record(paths["forget"]), _record(paths["retain_qa"])], key=lambda r: r["path"])
    assert task.meta["inputs"] == want
    obliviate.finetune(model, tok, task, out_dir=tmp_path / "ft", epochs=1)
    assert _inputs(tmp_path / "ft") == want
    assert read_model_card(tmp_path / "ft" / "model")["obliviate"]["inputs"] == want
    assert "inputs" not in task.summary()  # the resume fingerprint reads the data, not where it lies


def test_the_recorded_files_do_not_change_what_the_task_is(tmp_path):
    """The same data read from another place: other recorded paths, the same task fingerprint (the controls'
    cache, :func:`obliviate.runs.cache.task_fingerprint`) and the same resume digest."""
    paths = write_user_files(tmp_path / "a", n_forget=4, n_retain=4)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    one = obliviate.load_task(forget=paths["forget"], retain=paths["retain_qa"])
    two = obliviate.load_task(forget=tmp_path / "b" / "forget.jsonl", retain=tmp_path / "b" / "retain.csv")
    assert one.meta["inputs"] != two.meta["inputs"]
    assert [r["sha256"] for r in one.meta["inputs"]] == [r["sha256"] for r in two.meta["inputs"]]
    assert task_fingerprint(one) == task_fingerprint(two) and task_digest(one) == task_digest(two)
