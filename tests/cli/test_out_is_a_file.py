"""Issue #56, item 9: an ``--out`` that is a file (or lies below one) is said to be one, before anything is loaded,
by every command, never "is not writable: File exists"."""

from __future__ import annotations

import pytest

from obliviate.cli.main import main
from tests._cli_errors import one_error
from tests._run_dirs import tiny_model_dir

COMMANDS = [["world"], ["eval", "--model", "{model}"], ["unlearn", "--method", "npo", "--model", "{model}"],
            ["attack", "--model", "{model}"], ["finetune", "--model", "{model}"], ["compare", "--model", "{model}"]]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("m"))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("below", [False, True], ids=["file", "below-a-file"])
def test_an_out_that_is_a_file_is_said_to_be_one(command, below, model, tmp_path, capsys):
    f = tmp_path / "results.txt"
    f.write_text("keep me")
    out = f / "run" if below else f
    argv = [a.format(model=model) for a in command] + ["--out", str(out), "--no-progress"]
    assert main(argv) == 2
    line = one_error(capsys)
    assert line == f"obliviate: error: --out {out}{f': {f}' if below else ''} is a file, not a directory", line
    assert f.read_text() == "keep me"
