"""Issue #56, item 9: every command writes its results to stdout and its own lines (what it says while it runs, its
warnings) to stderr, the same way: no ``obliviate:`` line on stdout, nothing but ``obliviate:`` lines on stderr (no
progress bar in a pipe), and the run's headline (outcome, verdict or what gives one) is stdout's last line."""

from __future__ import annotations

import pytest

from obliviate.cli.main import main

from tests.tasks._userdata import save_tiny_model, write_user_files


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    paths = write_user_files(root / "data", n_forget=6, n_retain=6)
    save_tiny_model(root / "random", "llama", paths["texts"], d_model=32)
    return root, ["--forget", str(paths["forget"]), "--retain", str(paths["retain_qa"]), "--no-progress"]


def _streams(capsys) -> tuple[list[str], list[str]]:
    c = capsys.readouterr()
    return c.out.strip().splitlines(), [line for line in c.err.splitlines() if line.strip()]


@pytest.mark.heavy(6)
def test_results_on_stdout_and_the_runs_own_lines_on_stderr(user, tmp_path, capsys):
    root, files = user
    runs = [
        (["finetune", "--model", str(root / "random"), "finetune.epochs=1"], "cost: "),
        (["unlearn", "--model", str(tmp_path / "finetune" / "model"), "--method", "npo", "unlearn.train.steps=1",
          "unlearn.batch_size=4"], "outcome: "),
        (["eval", "--model", str(tmp_path / "unlearn" / "model")], "}"),
        (["attack", "--model", str(tmp_path / "unlearn" / "model"), "--attacks", "quantize", "--control", "none"],
         "no verdict: "),
    ]
    for argv, last in runs:
        assert main([*argv, *files, "--out", str(tmp_path / argv[0])]) == 0, argv[0]
        out, err = _streams(capsys)
        assert out and out[-1].startswith(last), (argv[0], out[-3:])
        assert not any(line.startswith("obliviate:") for line in out), (argv[0], out)
        assert all(line.startswith("obliviate: ") for line in err), (argv[0], err)
