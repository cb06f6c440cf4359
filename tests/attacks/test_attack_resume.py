"""Issue #28, item 8, on ``obliviate attack``: a forget file edited without changing its size, rerun into the same
--out, starts afresh with one line saying the data changed (the run's fingerprint held the task's sizes only, so
the relearning checkpoints of the old facts were resumed)."""

import json

from obliviate.cli.main import main

from tests.evidence.test_negative_control import _user_models


def test_an_edited_forget_file_of_the_same_size_starts_afresh(tmp_path, capsys):
    files, rest = _user_models(tmp_path, {})
    argv = ["attack", "--model", str(tmp_path / "random"), *files, "--out", str(tmp_path / "run"), *rest,
            "attacks.probe=false", "--base-untrained", str(tmp_path / "random"), "--control", "untaught"]
    assert main(argv) == 0
    assert main(argv) == 0
    assert "starting afresh" not in capsys.readouterr().err  # the same data: resumed
    forget = tmp_path / "data" / "forget.jsonl"
    rows = [json.loads(line) for line in forget.read_text().splitlines()]
    rows[0]["response"] = rows[0]["response"] + "x"  # one answer edited, same row count
    forget.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(argv) == 0
    lines = [l for l in capsys.readouterr().err.splitlines() if "starting afresh" in l]
    assert len(lines) == 1 and "other data" in lines[0]


def test_finetune_on_an_edited_forget_file_of_the_same_size_starts_afresh(tmp_path, capsys):
    """The same for ``obliviate finetune`` (its checkpoints, with finetune.checkpoint_every, were resumed)."""
    files, _ = _user_models(tmp_path, {})
    argv = ["finetune", "--model", str(tmp_path / "random"), *files[:4], "--out", str(tmp_path / "ft"),
            "--no-progress", "finetune.epochs=1", "finetune.batch_size=4", "finetune.checkpoint_every=1",
            "eval.max_new_tokens=2"]
    assert main(argv) == 0
    assert main(argv) == 0
    assert "starting afresh" not in capsys.readouterr().err
    forget = tmp_path / "data" / "forget.jsonl"
    forget.write_text(forget.read_text().replace('"}', 'x"}', 1))  # one answer edited, same row count
    assert main(argv) == 0
    lines = [l for l in capsys.readouterr().err.splitlines() if "starting afresh" in l]
    assert len(lines) == 1 and "other data" in lines[0]
