"""``obliviate tofu --model M --retain-model R``: the TOFU protocol on two given models, nothing trained
(the end-to-end test is skipped without the TOFU files)."""

import hashlib
import json
import math
import shutil

import pytest

from tests._run_dirs import tiny_model_dir

from obliviate.pipelines.tofu import run as tofu
from obliviate.tasks.tofu import TOFU_SPLITS
from obliviate.cli.main import main
from obliviate.errors import ConfigError, DataError
from obliviate.eval.tofu import UTILITY_KEYS
from obliviate.runs.results import read_results
from obliviate.pipelines.tofu import (FORGET_SPLITS, TofuConfig, check_tofu_data, prepare_bases, required_files,
                                      tofu_config)

TINY = {"seed": 1, "limit": 12, "epochs": 2, "batch_size": 4, "warmup_steps": 0, "max_new_tokens": 4,
        "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "vocab_size": 400}}
"""The tiny models of tests/pipelines/test_tofu_protocol.py, but seed 1: other cache entries than that test's, whose
first run must train."""
METRICS = ("model_utility", "forget10_rouge_l", "forget_rouge_l", "forget_prob", "forget_truth_ratio", *UTILITY_KEYS)
"""Every metric the tiny protocol reports for each model (plus forget_quality for base and the method)."""


def need_tofu():
    try:
        check_tofu_data()
    except DataError as e:
        pytest.skip(str(e))


def fingerprint(d):
    return {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
            for f in sorted(d.iterdir()) if f.is_file()}


def no_model_loading(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a model or tokenizer was loaded")

    monkeypatch.setattr(tofu, "load_model", boom)
    monkeypatch.setattr(tofu, "load_tokenizer", boom)


def test_given_models_end_to_end(tmp_path, capsys):
    need_tofu()
    bases = prepare_bases(tofu_config(**TINY), progress=False)  # two tiny models, as if fine-tuned elsewhere
    dirs = {name: tmp_path / name for name in ("base", "retain_model")}
    for name, d in dirs.items():
        shutil.copytree(bases.roots[name] / "model", d)
    before = fingerprint(dirs["base"])
    out = tmp_path / "run"
    argv = ["tofu", "--model", str(dirs["base"]), "--retain-model", str(dirs["retain_model"]), "--method", "graddiff",
            "--out", str(out), "--no-progress", "limit=12", "max_new_tokens=4", "unlearn.train.steps=2",
            "unlearn.batch_size=4"]
    assert main(argv) == 0
    res = read_results(out)
    m = res["metrics"]
    assert res["status"] == "complete" and set(m) == {"base", "retain_model", "graddiff"}
    for name in m:
        for key in METRICS + (("forget_quality",) if name != "retain_model" else ()):
            assert math.isfinite(m[name][key]), (name, key)
    assert 0.0 <= m["graddiff"]["forget_quality"] <= 1.0 and "forget_quality" not in m["retain_model"]
    # The same two models and data, evaluated as the tiny protocol does: the same numbers.
    for name in ("base", "retain_model"):
        assert m[name] == pytest.approx(bases.metrics[name], rel=1e-6), name
    assert res["base_dirs"] == {k: str(d) for k, d in dirs.items()}
    assert res["given_models"]["model"] == str(dirs["base"]) and "base_cached" not in res["timings"]
    per = json.loads((out / "per_example.json").read_text())
    assert len(per["graddiff"]["forget_truth_ratio"]) == 12
    assert (out / "model" / "config.json").is_file()
    assert fingerprint(dirs["base"]) == before  # unlearning changed a copy, never the given model's files
    assert "graddiff: forget_quality" in capsys.readouterr().out


def test_model_needs_retain_model_before_anything(tmp_path, capsys, monkeypatch):
    no_model_loading(monkeypatch)
    out = tmp_path / "out"
    model = tiny_model_dir(tmp_path)  # a valid model directory: the input boundary checks it first (issue #42)
    capsys.readouterr()
    assert main(["tofu", "--model", str(model), "--method", "graddiff", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model needs --retain-model" in err
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--tokenizer", "tok"], "--tokenizer needs --model"),
    (["--retain-model", "r"], "--retain-model needs --model"),
    (["--model", "m", "--retain-model", "r", "--method", "nope"], "unknown method 'nope'"),
    (["--model", "m", "--retain-model", "r", "--forget", "forget20"], "unknown forget split 'forget20'"),
])
def test_bad_arguments_fail_before_anything(tmp_path, capsys, monkeypatch, argv, message):
    no_model_loading(monkeypatch)
    out = tmp_path / "out"
    assert main(["tofu", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_bad_paths_and_tiny_keys_fail_before_loading(tmp_path, capsys, monkeypatch):
    need_tofu()
    no_model_loading(monkeypatch)
    tiny_model_dir(tmp_path)  # tmp_path / "model": valid, as the input boundary checks it first (issue #42)
    capsys.readouterr()
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    good = ["--model", str(tmp_path / "model"), "--retain-model", str(tmp_path / "model")]
    for argv, message in [
        (["--model", str(tmp_path / "nowhere"), "--retain-model", str(tmp_path / "model")], "does not exist"),
        (["--model", str(tmp_path / "model"), "--retain-model", str(tmp_path / "empty")], "has no config.json"),
        (["--model", str(tmp_path / "model"), "--retain-model", "not a hub id!"], "does not exist"),
        ([*good, "--tokenizer", str(tmp_path / "empty")], "has no tokenizer.json or tokenizer_config.json"),
        ([*good, "epochs=3"], "config key 'epochs' configures training the tiny models"),
        ([*good, "model.d_model=64"], "config key 'model.d_model' configures training the tiny models"),
    ]:
        assert main(["tofu", *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, (argv, err)
        assert not out.exists()
    # The unlearned model may not land on a given model's files.
    assert main(["tofu", *good, "--out", str(tmp_path)]) == 2
    assert "would overwrite the given model" in capsys.readouterr().err


def test_forget_splits_and_their_files():
    assert all(f in TOFU_SPLITS and r in TOFU_SPLITS and f"{f}_perturbed" in TOFU_SPLITS
               for f, r in FORGET_SPLITS.items())
    assert required_files("forget05", given=True) == ("forget05", "retain95", "forget05_perturbed",
                                                       "retain_perturbed", "real_authors_perturbed",
                                                       "world_facts_perturbed", "real_authors", "world_facts")
    assert required_files("forget01")[:4] == ("full", "retain99", "forget01", "forget01_perturbed")
    assert TofuConfig(forget="forget05").retain == "retain95"
    with pytest.raises(ConfigError, match="config key 'forget'"):
        TofuConfig(forget="forget20")
