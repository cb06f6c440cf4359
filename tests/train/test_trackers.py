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
