"""``rwku:<target>`` on a fixture in RWKU's own layout and field names (process/data_process.py of the
jinzhuoran/RWKU repository: ``rwku/Target/<n>_<Name>/<part>.json``, each a JSON list): the sets carry RWKU's names,
and ``eval``, ``unlearn`` and ``compare`` run on it with a tiny model."""

import json

import pytest

from _userdata import RWKU_TARGET as TARGET, write_rwku
from obliviate.cli.main import main
from obliviate.errors import DataError
from obliviate.tasks import load_task
from tests._run_dirs import tiny_model_dir



def test_sets_carry_rwkus_names_and_roles(tmp_path):
    write_rwku(tmp_path)
    task = load_task("rwku:stephen_king", root=tmp_path)
    assert load_task("rwku:1", root=tmp_path).name == task.name == "rwku:stephen_king"
    sets = {e.name: (e.role, e.kind, e.variant) for e in task.evals}
    assert sets == {"forget_level1": ("forget", "qa", False), "forget_level2": ("forget", "qa", False),
                    "forget_level3": ("forget", "qa", True), "neighbor_level1": ("neighbour", "qa", False),
                    "neighbor_level2": ("neighbour", "qa", False), "utility_general": ("utility", "mcq", False),
                    "utility_factuality": ("utility", "qa", False), "forget_mia": ("forget", "text", False),
                    "retain_mia": ("retain", "text", False)}
    level1 = next(e for e in task.evals if e.name == "forget_level1").items[0]
    assert level1.question.startswith("Please complete the blank") and level1.answer == "book0"
    assert level1.meta["entity"] == TARGET
    assert next(e for e in task.evals if e.name == "forget_level3").items[1].meta["type"] == "affirmative suffix"
    assert len(task.forget.docs) == 3 and task.retain.docs[0].startswith("The river 0")
    assert task.meta["missing"] == []


def test_a_missing_part_is_a_line_and_a_missing_target_one_error(tmp_path):
    d = write_rwku(tmp_path)
    (d / "triviaqa.json").unlink()
    task = load_task("rwku:Stephen King", root=tmp_path)
    assert "utility_factuality" not in {e.name for e in task.evals}
    assert any("triviaqa.json" in line for line in task.meta["missing"])
    with pytest.raises(DataError, match="no directory for target 'Bruce Lee'.*allow_hub=True"):
        load_task("rwku:Bruce Lee", root=tmp_path)


@pytest.mark.heavy(8)
def test_eval_unlearn_and_compare_run_on_the_fixture(tmp_path, monkeypatch):
    write_rwku(tmp_path / "data")
    monkeypatch.setenv("OBLIVIATE_DATA", str(tmp_path / "data"))
    model = str(tiny_model_dir(tmp_path))
    common = ["--task", "rwku:stephen_king", "--model", model, "--no-progress"]
    assert main(["eval", *common, "--max-new-tokens", "3", "--out", str(tmp_path / "eval")]) == 0
    metrics = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]["model"]
    assert any(k.startswith("forget_level3") for k in metrics) and any(k.startswith("neighbor_level2")
                                                                         for k in metrics), sorted(metrics)
    assert main(["unlearn", *common, "--max-new-tokens", "3", "--method", "graddiff",
                 "--out", str(tmp_path / "unlearn"), "unlearn.train.steps=2"]) == 0
    assert main(["compare", *common, "--out", str(tmp_path / "compare"), "--control", "none",
                 "--attacks", "format_shift", "methods=[graddiff]", "runs.graddiff.train.steps=1"]) == 0
    report = json.loads((tmp_path / "compare" / "results.json").read_text())
    assert "graddiff" in json.dumps(report) and "neighbor_level1" in json.dumps(report)
