"""The Python API (obliviate.api, exported by ``import obliviate``): the README's example runs as written, and
what the docstrings promise about copies holds."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import obliviate
from obliviate.errors import ConfigError
from obliviate.models.load import load_model, load_tokenizer
from obliviate.pipelines.compare.run import ComparePlan

ROOT = Path(__file__).resolve().parents[2]


def test_the_api_is_exported_as_functions_even_after_the_modules_are_imported():
    import obliviate.unlearning.engine  # noqa: F401  (the executor module must not shadow obliviate.unlearn)
    import obliviate.pipelines.compare.run  # noqa: F401

    for name in ("load_task", "finetune", "unlearn", "evaluate", "attack", "compare"):
        assert callable(getattr(obliviate, name)) and getattr(obliviate, name).__module__ == "obliviate.api", name
    from obliviate import unlearn

    assert unlearn is obliviate.api.unlearn


@pytest.mark.heavy(16)
def test_readme_python_example_runs_as_written(user_models, tmp_path):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## From Python.*?```python\n(.*?)```", text, re.S).group(1)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "example.py").write_text(block)
    env = {**os.environ, "MODEL": str(user_models["qwen2"]), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"forget ([\d.]+) -> ([\d.]+), retain ([\d.]+) -> ([\d.]+)", r.stdout)
    assert m, r.stdout
    f0, f1, r0, r1 = map(float, m.groups())
    assert f0 >= 0.8 and f1 < f0  # fine-tuning taught the facts, unlearning took some away
    assert "after relearning on the other half of the facts" in r.stdout


def test_unlearn_copies_unless_told_otherwise(user_models, user_files):
    d = user_models["llama"]
    model, tok = load_model(str(d)), load_tokenizer(str(d))
    task = obliviate.load_task(forget=user_files["forget"], retain=user_files["retain_qa"], limit=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new, info = obliviate.unlearn(model, tok, task, "GradDiff", train={"steps": 2, "lr": 1e-3})
    assert new is not model and info["method"] == "graddiff" and info["settings"]["steps"] == 2
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the original is untouched
    assert any(not torch.equal(before[k], v) for k, v in new.state_dict().items())
    same, _ = obliviate.unlearn(model, tok, task, "graddiff", train={"steps": 2, "lr": 1e-3}, in_place=True)
    assert same is model and any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bad_api_inputs_are_one_line_errors(user_files):
    with pytest.raises(ConfigError, match="Task"):
        obliviate.evaluate(None, None, "world")
    with pytest.raises(ConfigError, match="not both"):
        obliviate.load_task("world", forget=user_files["forget"])
    with pytest.raises(ConfigError, match="forget files"):
        obliviate.load_task(retain=user_files["retain_qa"])


class _Planned(Exception):
    """Raised where the pipeline would start, once its settings are captured."""


def _capture(monkeypatch, target: str, where: dict, index: int):
    """Replace ``target`` (``module.function``) with a stand-in that keeps its ``index``-th argument (the settings)
    and stops the run."""
    def stop(*a, **kw):
        where[target] = a[index]
        raise _Planned

    monkeypatch.setattr(target, stop)


@pytest.mark.parametrize("seed", [0, 7])
def test_the_api_and_the_command_line_plan_the_same_comparison(user_models, user_files, tmp_path, monkeypatch, seed):
    """``obliviate.compare`` and ``obliviate compare`` build one frozen plan (compare_settings, compare_plan) from the
    same inputs: the seed at every seed of the run (the attacks', the pretraining's and its world's), the methods,
    the attacks and runs.*."""
    from obliviate.cli.main import main
    from obliviate.config import to_dict

    got: dict = {}
    _capture(monkeypatch, "obliviate.api.run_compare_dir", got, 1)
    _capture(monkeypatch, "obliviate.cli.compare.run_compare_dir", got, 1)
    d = str(user_models["llama"])
    forget, retain = str(user_files["forget"]), str(user_files["retain_qa"])
    with pytest.raises(_Planned):
        main(["compare", "--model", d, "--forget", forget, "--retain", retain, "--seed", str(seed), "--methods",
              "NPO,rmu", "--attacks", "quantize,ablate", "--out", str(tmp_path / "cli"), "--no-progress",
              "runs.npo.train.steps=2", "eval_batch_size=4"])
    task = obliviate.load_task(forget=forget, retain=retain)
    with pytest.raises(_Planned):
        obliviate.compare(load_model(d), load_tokenizer(d), task, tmp_path / "api", seed=seed, methods=["NPO", "rmu"],
                          attacks="quantize,ablate", runs={"npo": {"train": {"steps": 2}}}, eval_batch_size=4)
    cli, api = (got[f"obliviate.{m}.run_compare_dir"] for m in ("cli.compare", "api"))
    assert isinstance(api, ComparePlan) and isinstance(cli, ComparePlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        api.methods = ()  # frozen: what runs is what was planned
    assert {f.name: getattr(api, f.name) for f in dataclasses.fields(api) if f.name != "cfg"} == \
        {f.name: getattr(cli, f.name) for f in dataclasses.fields(cli) if f.name != "cfg"}
    assert api.methods == ("npo", "rmu") and api.model == cli.model == d
    cfg = to_dict(api.cfg)
    assert cfg == to_dict(cli.cfg)
    assert (cfg["seed"], cfg["attacks"]["seed"], cfg["pretrain"]["seed"], cfg["pretrain"]["world"]["seed"]) == \
        (seed,) * 4
    assert cfg["methods"] == ["npo", "rmu"] and cfg["runs"] == {"npo": {"train": {"steps": 2}}}


@pytest.mark.parametrize("seed", [0, 5])
def test_the_api_and_the_command_line_plan_the_same_unlearning(user_models, user_files, tmp_path, monkeypatch, seed):
    """``obliviate.unlearn`` and ``obliviate unlearn`` resolve the same settings (unlearn_settings) from the same
    inputs, the seed included (the run's and the unlearning's)."""
    from obliviate.cli.main import main
    from obliviate.config import to_dict

    got: dict = {}
    _capture(monkeypatch, "obliviate.api.run_unlearn", got, 3)
    _capture(monkeypatch, "obliviate.cli.unlearn.run_unlearn", got, 3)
    d = str(user_models["llama"])
    forget, retain = str(user_files["forget"]), str(user_files["retain_qa"])
    with pytest.raises(_Planned):
        main(["unlearn", "--model", d, "--forget", forget, "--retain", retain, "--seed", str(seed), "--method", "NPO",
              "--out", str(tmp_path / "cli"), "--no-progress", "unlearn.train.steps=2", "unlearn.params.beta=0.2"])
    task = obliviate.load_task(forget=forget, retain=retain)
    with pytest.raises(_Planned):
        obliviate.unlearn(load_model(d), load_tokenizer(d), task, "npo", seed=seed, train={"steps": 2},
                          params={"beta": 0.2})
    cli, api = (to_dict(got[f"obliviate.{m}.run_unlearn"]) for m in ("cli.unlearn", "api"))
    assert api == cli
    assert (api["seed"], api["unlearn"]["seed"], api["unlearn"]["method"]) == (seed, seed, "npo")
    assert api["unlearn"]["train"]["steps"] == 2 and api["unlearn"]["params"]["beta"] == 0.2
