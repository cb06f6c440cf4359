"""A run writes only its own files under --out (issue #27): no write through a symbolic link or a hard
link, and a re-run that fails or is interrupted leaves the previous run's results.json, model and card
whole (the overlap check of every command: tests/test_out_overlap.py)."""

import json
import os

import pytest

import obliviate.pipelines.unlearn as unlearn_pipeline
from obliviate.cli.main import main
from obliviate.errors import ObliviateError
from obliviate.models.load import save_model
from obliviate.runs.results import prepare_out_dir
from obliviate.utils import atomic_write_text

from tests._cli_errors import SMALL_WORLD, one_error
from tests._run_dirs import UNLEARN, snapshot, tiny_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("safety"))


def test_a_save_through_a_link_elsewhere_writes_nothing_there(model_dir, tmp_path):
    """A link that points anywhere (not an input): a model save, a report, a file in a linked subfolder are
    refused; the link targets stay as they were."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")  # a finished run: its model is moved aside on a rerun
    (out / "model").symlink_to(elsewhere)
    with pytest.raises(ObliviateError, match="out/model: it is a symbolic link"):
        prepare_out_dir(out)  # (it would move OUT/model aside)
    assert (out / "results.json").read_text() == "{}" and not (out / "previous").exists()  # put back as it was
    (out / "model").unlink()
    (out / "results.json").unlink()
    (out / "models").symlink_to(elsewhere)
    (out / "report.md").symlink_to(elsewhere / "keep.txt")
    (out / "plots").symlink_to(elsewhere)
    prepare_out_dir(out)
    from obliviate.models.load import load_model

    model = load_model(model_dir)
    for write in (lambda: save_model(model, out / "models" / "npo"), lambda: atomic_write_text(out / "report.md", "x"),
                  lambda: atomic_write_text(out / "plots" / "a" / "curve.svg", "x")):
        with pytest.raises(ObliviateError, match="a symbolic link"):
            write()
    assert snapshot(elsewhere) == {"keep.txt": b"keep"}


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_linked_lock_file_is_refused_and_its_target_not_truncated(tmp_path, capsys, link):
    """OUT/.obliviate.lock a link to another file: taking the lock truncated that file. Now one line."""
    target = tmp_path / "precious.txt"
    target.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".obliviate.lock").symlink_to(target) if link == "symbolic" else os.link(target, out / ".obliviate.lock")
    assert main(["world", *[a.removeprefix("world.") for a in SMALL_WORLD], "--out", str(out)]) == 2
    assert ".obliviate.lock" in one_error(capsys)
    assert target.read_text() == "precious\n"
    assert not (out / "results.json").exists()


def test_a_linked_metrics_file_is_not_rewritten_on_resume(tmp_path):
    """OUT/train/metrics.jsonl a link: a resumed run rewrote its target. Now refused, target unchanged."""
    import torch

    from obliviate.train import TrainConfig, train

    out = tmp_path / "out"
    prepare_out_dir(out)
    model = torch.nn.Linear(2, 1)
    loss = lambda m, b, s: {"mse": (m(b) ** 2).mean()}
    cfg = TrainConfig(steps=4, lr=1e-2, checkpoint_every=2, log_every=1, progress=False)
    train(model, loss, lambda step: torch.ones(3, 2), cfg, out / "train")
    target = tmp_path / "log.jsonl"
    target.write_text('{"step": 9}\n')
    (out / "train" / "metrics.jsonl").unlink()
    (out / "train" / "metrics.jsonl").symlink_to(target)
    with pytest.raises(ObliviateError, match="metrics.jsonl: it is a symbolic link"):
        train(model, loss, lambda step: torch.ones(3, 2), cfg, out / "train")  # resumes from step 2
    assert target.read_text() == '{"step": 9}\n'


def test_a_rerun_with_a_bad_layer_leaves_the_finished_run_whole(model_dir, tmp_path, capsys):
    """A re-run into a finished run's --out with RMU's layer out of range: refused before --out is touched
    (it came after the whole "before" evaluation and results.json was deleted first)."""
    out = tmp_path / "out"
    assert main([*UNLEARN, "--method", "rmu", "--model", str(model_dir), "--out", str(out)]) == 0
    done = snapshot(out)
    capsys.readouterr()
    assert main([*UNLEARN, "--method", "rmu", "--model", str(model_dir), "--out", str(out),
                 "unlearn.params.layer=7"]) == 2
    assert "layer 7 out of range" in one_error(capsys)
    assert snapshot(out) == done


def test_an_interrupted_rerun_moves_the_finished_run_aside_whole(model_dir, tmp_path, capsys, monkeypatch):
    """A re-run with another config, interrupted during training: the previous results.json, model and card
    are in OUT/previous/, byte-identical, said in one line; nothing in OUT looks like a finished run."""
    out = tmp_path / "out"
    assert main([*UNLEARN, "--method", "graddiff", "--model", str(model_dir), "--out", str(out)]) == 0
    keep = {k: v for k, v in snapshot(out).items() if k == "results.json" or k.startswith("model/")}
    assert "model/README.md" in keep and "model/model.safetensors" in keep
    capsys.readouterr()

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(unlearn_pipeline, "unlearn", interrupted)
        assert main([*UNLEARN, "--method", "graddiff", "--model", str(model_dir), "--out", str(out),
                     "unlearn.train.steps=3"]) == 130
    err = [l for l in capsys.readouterr().err.splitlines() if l.startswith("obliviate:")]
    assert err[-1] == f"obliviate: interrupted (the previous run's results.json and model moved to {out}/previous/)"
    assert not (out / "results.json").exists() and not (out / "model").exists()
    assert snapshot(out / "previous") == keep
    assert main([*UNLEARN, "--method", "graddiff", "--model", str(model_dir), "--out", str(out),
                 "unlearn.train.steps=3"]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["unlearn"]["train"]["steps"] == 3
    assert snapshot(out / "previous") == keep  # the interrupted run left no results.json or model to move
    assert "moved to" not in capsys.readouterr().err
    assert main([*UNLEARN, "--method", "graddiff", "--model", str(model_dir), "--out", str(out),
                 "unlearn.train.steps=3"]) == 0  # a finished re-run says it in a line of its own, at the end
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"obliviate: the previous run's results.json and model moved to {out}/previous/"
