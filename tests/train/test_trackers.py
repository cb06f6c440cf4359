"""Experiment trackers get exactly the records metrics.jsonl gets (obliviate.train.trackers)."""

import json

import pytest

import obliviate.train.trackers as T
from obliviate.errors import ConfigError
from obliviate.losses import lm_loss
from obliviate.train import TrainConfig, TrainingDiverged, train

from test_loop import data, tiny


class Fake:
    opened: list = []

    def __init__(self, run_dir, name, config):
        self.records, self.closed, self.name, self.config = [], 0, name, config
        Fake.opened.append(self)

    def log(self, rec, step):
        self.records.append((step, {k: v for k, v in rec.items() if k != "step"}))

    def close(self):
        self.closed += 1


@pytest.fixture
def fake(monkeypatch):
    Fake.opened = []
    monkeypatch.setitem(T.TRACKERS, "fake", Fake)
    return Fake


def test_tracker_gets_every_logged_record_with_its_step(tmp_path, fake):
    cfg = TrainConfig(steps=4, lr=1e-2, log_every=2, progress=False, report_to=["fake"], desc="run-x")
    train(tiny(), lambda m, b, s: {"lm": lm_loss(m, b)}, data(), cfg, tmp_path,
          eval_fn=lambda m, step: {"acc": 0.5}, eval_every=2)
    (t,) = fake.opened
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in lines] == t.records
    assert t.closed == 1 and t.name == "run-x" and t.config["steps"] == 4


def test_tracker_is_closed_when_training_fails(tmp_path, fake):
    cfg = TrainConfig(steps=3, lr=1e-2, log_every=1, progress=False, report_to=["fake"])
    with pytest.raises(TrainingDiverged):
        train(tiny(), lambda m, b, s: {"lm": lm_loss(m, b) * float("nan")}, data(), cfg, tmp_path)
    assert fake.opened[0].closed == 1


def test_unknown_or_missing_tracker_is_one_line(monkeypatch):
    with pytest.raises(ConfigError, match="unknown tracker.*'tensorbored'.*valid: tensorboard, mlflow, wandb"):
        TrainConfig(report_to=["tensorbored"])
    import builtins

    real = builtins.__import__

    def no_mlflow(name, *a, **k):
        if name == "mlflow":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    with pytest.raises(ConfigError, match="pip install mlflow"):
        T.open_trackers(["mlflow"], None, "x")


def test_tensorboard_writes_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = TrainConfig(steps=2, lr=1e-2, log_every=1, progress=False, report_to=["tensorboard"])
    train(tiny(), lambda m, b, s: {"lm": lm_loss(m, b)}, data(), cfg, tmp_path)
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == [1, 2]


@pytest.mark.heavy(5)
def test_log_with_writes_tensorboard_and_mlflow_and_they_read_back(tmp_path, monkeypatch):
    """``--log-with tensorboard,mlflow`` on a command that trains: event files and a local MLflow store hold the
    loss terms by name, step by step."""
    pytest.importorskip("tensorboard")
    mlflow = pytest.importorskip("mlflow")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from obliviate.cli.main import main

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(T, "_DEFAULT", [])
    out = tmp_path / "run"
    rc = main(["pretrain", "--out", str(out), "--no-progress", "--log-with", "tensorboard,mlflow",
               "world.n_forget=3", "world.n_holdout=1", "world.n_retain=3", "world.n_general=2", "world.n_concept=2",
               "world.n_toxic=2", "model.size=nano", "train.steps=4", "train.log_every=2", "train.warmup_steps=1"])
    assert rc in (0, None)
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("lm")] == [2, 4] and [e.step for e in acc.Scalars("qa")] == [2, 4]
    client = mlflow.tracking.MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert len(runs) == 1
    history = client.get_metric_history(runs[0].info.run_id, "lm")
    assert [m.step for m in history] == [2, 4]
    with pytest.raises(SystemExit):
        main(["pretrain", "--out", str(tmp_path / "x"), "--log-with"])
    assert main(["pretrain", "--out", str(tmp_path / "y"), "--log-with", "tensorbored"]) == 2
