"""The overlap check of every command (issue #27): an --out that is, holds or lies inside an input (a model,
a data file), or holds a symbolic link to one, is refused in one line before anything is touched."""

import json

import pytest

from obliviate.cli.main import main

from tests._cli_errors import one_error
from tests._run_dirs import UNLEARN, snapshot, tiny_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("overlap"))


def test_a_model_folder_linked_to_the_input_model_is_refused_and_the_input_unchanged(model_dir, tmp_path, capsys):
    """OUT/model -> the input model: unlearn wrote the unlearned weights through it (exit 0). Now refused, in
    one line naming the link, before the model is loaded; nothing of the input changes."""
    before = snapshot(model_dir)
    out = tmp_path / "out"
    out.mkdir()
    (out / "model").symlink_to(model_dir)
    assert main([*UNLEARN, "--method", "graddiff", "--model", str(model_dir), "--out", str(out)]) == 2
    err = one_error(capsys)
    assert "model" in err and "symbolic link" in err and str(model_dir) in err
    assert snapshot(model_dir) == before
    assert not (out / "results.json").exists() and not (out / ".obliviate.lock").exists()


def test_a_link_to_a_folder_holding_the_input_or_inside_it_is_refused(model_dir, tmp_path, capsys):
    """The same through a link deeper in --out, to the folder above the input model (held-back kind)."""
    out = tmp_path / "out"
    (out / "methods").mkdir(parents=True)
    (out / "methods" / "npo").symlink_to(model_dir.parent)
    assert main([*UNLEARN, "--method", "npo", "--model", str(model_dir), "--out", str(out)]) == 2
    assert "methods/npo" in one_error(capsys)


def test_every_command_refuses_an_out_that_holds_an_input(model_dir, tmp_path, capsys):
    """The overlap check on every command: --out the folder of a --forget file (held-back data file kind),
    inside the model directory, and a world/pretrain/bench --out that is empty."""
    from tests.tasks._userdata import write_user_files

    paths = write_user_files(tmp_path / "data")
    files = ["--forget", str(paths["forget"]), "--retain", str(paths["retain_qa"])]
    for argv in (["unlearn", "--method", "npo", "--model", str(model_dir), *files, "--out", str(tmp_path / "data")],
                 ["finetune", "--model", str(model_dir), *files, "--out", str(tmp_path / "data")],
                 ["unlearn", "--method", "npo", "--model", str(model_dir), "--out", str(model_dir / "run")]):
        before = snapshot(tmp_path / "data")
        assert main(argv) == 2
        assert "overlaps the input" in one_error(capsys)
        assert snapshot(tmp_path / "data") == before
    qa = tmp_path / "evalrun" / "predictions.json"  # eval --data: its own input was OUT/predictions.json
    qa.parent.mkdir()
    qa.write_text(json.dumps([{"question": "Where does Ka Lo live?", "answer": "Velmora"}]))
    for argv in (["eval", "--model", str(model_dir), "--data", str(qa), "--kind", "qa", "--out", str(qa.parent)],
                 ["eval", "--model", str(model_dir), "--data", str(paths["forget"]), "--out", str(tmp_path / "data")],
                 ["eval", "--model", str(model_dir), "--benchmark", "wmdp_bio", "--out", str(model_dir)]):
        before = snapshot(tmp_path)
        assert main(argv) == 2
        assert "overlaps the input" in one_error(capsys)
        assert snapshot(tmp_path) == before
    for cmd in ("world", "pretrain", "bench"):
        assert main([cmd, "--out", ""]) == 2
        assert "--out is empty" in one_error(capsys)


def test_attack_refuses_an_out_inside_its_negative_control(model_dir, tmp_path, capsys):
    """attack reads --base-untrained (the negative control) too: an --out inside it is refused in one line, before
    any model is loaded, and the control's files are unchanged (it was missing from the check's inputs)."""
    from tests.tasks._userdata import write_user_files

    paths = write_user_files(tmp_path / "data")
    control = tiny_model_dir(tmp_path / "control")
    before = snapshot(control)
    argv = ["attack", "--model", str(model_dir), "--forget", str(paths["forget"]), "--retain",
            str(paths["retain_qa"]), "--no-progress", "--base-untrained", str(control)]
    for out in (control / "run", control):
        assert main([*argv, "--out", str(out)]) == 2
        err = one_error(capsys)
        assert "overlaps the input directory" in err and str(control) in err
        assert snapshot(control) == before
