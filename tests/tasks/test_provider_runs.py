"""Every task provider runs the whole path on tiny data: finetune a tiny model on the task, unlearn, evaluate
and attack (through :func:`obliviate.pipelines.compare.run.run_compare`). Parametrised over the registry, so a new
provider fails here until it has a tiny-data builder below."""

from __future__ import annotations

import json

import pytest
import yaml

from _userdata import write_rwku, write_user_files
from obliviate.config import from_dict
from obliviate.pipelines.compare.run import CompareConfig, compare_plan, run_compare
from obliviate.tasks import load_task, task_names
from obliviate.utils import data_dir


def _real(rel: str):
    if not (data_dir() / rel).exists():
        pytest.skip(f"{data_dir() / rel} not present")


def _world(tmp_path, request):
    return load_task("world", world={"n_forget": 3, "n_holdout": 1, "n_retain": 3, "n_general": 3, "n_concept": 2,
                                     "n_toxic": 4})


def _tofu(tmp_path, request):
    _real("tofu/forget01.json")
    return load_task("tofu:forget01", limit=6)


def _ember(tmp_path, request):
    _real("ember/mc_questions.json")
    return load_task("ember:harry_potter", limit=6)


def _wmdp(tmp_path, request):
    return load_task("wmdp:bio", root=request.getfixturevalue("tiny_wmdp"), limit=6)


def _benchmark(tmp_path, request):
    return load_task("benchmark:wmdp_bio", root=request.getfixturevalue("tiny_wmdp"), limit=6)


def _muse(tmp_path, request):
    return load_task("muse:news", root=request.getfixturevalue("tiny_muse"))


def _rwku(tmp_path, request):
    write_rwku(tmp_path / "data")
    return load_task("rwku:stephen_king", root=tmp_path / "data")


def _file(tmp_path, request):
    files = write_user_files(tmp_path / "data", n_forget=6, n_retain=6)
    spec = {"forget": ["data/forget.jsonl"], "retain": ["data/retain.csv", {"path": "data/retain_docs.txt"}],
            "utility": ["data/utility_mcq.json"], "relearn": ["data/related.txt"]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert files["forget"].exists()
    return load_task(f"file:{tmp_path / 'spec.yaml'}")


BUILDERS = {"world": _world, "tofu": _tofu, "ember": _ember, "wmdp": _wmdp, "benchmark": _benchmark, "muse": _muse,
            "rwku": _rwku, "file": _file}

TINY = {"methods": ["npo", "rmu"], "finetune": {"epochs": 2},
        "runs": {"npo": {"train": {"steps": 2}}, "rmu": {"train": {"steps": 2}}},
        "attacks": {"relearn": {"steps": 2, "eval_every": 1}, "lr_grid": [1e-3], "lora": False},
        "tiny": {"d_model": 32, "vocab_size": 400},
        "pretrain": {"model": {"size": "nano", "vocab_size": 400}, "batch_size": 4,  # the world's own base model
                     "train": {"steps": 20, "warmup_steps": 2}}}


def test_every_provider_has_a_tiny_run():
    assert sorted(BUILDERS) == task_names()


# the world's whole path is also run by tests/pipelines/test_compare.py and the demo, TOFU's by the TOFU protocol's
# end-to-end tests (tests/pipelines/test_tofu_protocol.py, test_tofu_given_models.py), MUSE's compare by
# tests/tasks/test_muse_sixway.py (12 s here), RWKU's by tests/tasks/test_rwku.py (14 s here), EMBER's by its recipe
# (tests/papers/test_ember_recipe.py) and the ember task's own tests (tests/ember/, tests/tasks/test_providers.py;
# 21 s here), and the benchmark provider's multiple-choice path by wmdp's, on the same files (12 s here): slow here
SLOW = {"world", "tofu", "muse", "ember", "rwku", "benchmark"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in task_names()])
@pytest.mark.heavy(10)
def test_provider_finetune_unlearn_eval_attack(name, tmp_path, request):
    task = BUILDERS[name](tmp_path, request)
    cfg = from_dict(CompareConfig, json.loads(json.dumps(TINY)))
    res = run_compare(task, compare_plan(cfg, task), tmp_path / "run")
    m = res["metrics"]
    has_questions = bool(task.forget.qa or any(es.kind == "qa" for es in task.evals_by_role("forget")))
    known = {"second_oracle", "filtered"} if task.pretrain is not None else set()  # a world is pretrained: both known
    controls = {"positive_control", "positive_control_smallnorm"} if has_questions else set()
    assert set(m) == {"base", "oracle", "npo", "rmu"} | controls | known
    assert set(res["robustness"]["verdicts"]) == {"npo", "rmu"} | known
    assert "## Robustness" in (tmp_path / "run" / "report.md").read_text()
    for row in m.values():
        assert any(k.endswith(("_em", "_acc", "_loss")) for k in row)  # evaluated on the task's sets
        assert row["attacks_run"]  # at least one attack had data
    assert (tmp_path / "run" / "models" / "base" / "config.json").exists() and (tmp_path / "run" / "report.md").exists()
