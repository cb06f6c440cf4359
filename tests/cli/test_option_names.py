"""Issue #56, item 9: a command-line error names the command line's options, never the Python API's arguments
(``pass root=...``, ``allow_hub=True``); the API's errors name the API's (obliviate.errors.setting)."""

from __future__ import annotations

import pytest

from obliviate.cli.main import main
from obliviate.errors import DataError
from obliviate.tasks import load_task
from tests._cli_errors import one_error
from tests._run_dirs import tiny_model_dir

TASKS = ["tofu:forget01", "muse:news", "wmdp:cyber", "rwku:stephen_king", "benchmark:wmdp_bio", "benchmark:mmlu",
         "benchmark:medmcqa"]
"""Every provider whose data has a hub release, on an empty data directory."""
API_ONLY = ("root=", "allow_hub")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("m"))


@pytest.mark.parametrize("task", TASKS)
def test_a_missing_benchmark_file_names_the_options_of_the_interface_used(task, model, tmp_path, monkeypatch,
                                                                          capsys):
    monkeypatch.setenv("OBLIVIATE_DATA", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    assert main(["eval", "--task", task, "--model", str(model), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    line = one_error(capsys)
    assert "--allow-hub" in line and "$OBLIVIATE_DATA" in line, line
    assert not any(a in line for a in API_ONLY), line
    with pytest.raises(DataError) as err:  # the same error from Python names Python's arguments
        load_task(task)
    assert "allow_hub=True" in str(err.value) and "--allow-hub" not in str(err.value)
