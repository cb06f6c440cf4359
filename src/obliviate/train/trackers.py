"""Experiment trackers: the training loop's logged records, also sent to TensorBoard, MLflow or Weights &
Biases (``TrainConfig.report_to``), from the main process only; each backend is an optional package imported
when asked for, a missing one a one-line error before training. docs/architecture.md, "Experiment trackers".
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from pathlib import Path

from obliviate.errors import ConfigError


def _numeric(rec: dict) -> dict[str, float]:
    return {k: float(v) for k, v in rec.items()
            if k != "step" and isinstance(v, numbers.Real) and not isinstance(v, bool)}


class TensorBoard:
    def __init__(self, run_dir: Path | None, name: str, config: dict | None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch's module imports the tensorboard package
            raise ConfigError("train.report_to: tensorboard needs the tensorboard package: "
                              "pip install tensorboard") from None
        if run_dir is None:
            raise ConfigError("train.report_to: tensorboard needs an output directory for its event files")
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, rec: dict, step: int) -> None:
        for k, v in _numeric(rec).items():
            self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.close()


class MLflow:
    def __init__(self, run_dir: Path | None, name: str, config: dict | None):
        try:
            import mlflow
        except ImportError:
            raise ConfigError("train.report_to: mlflow needs the mlflow "
                              "package: pip install mlflow") from None
        self.mlflow = mlflow
        # offline: a store in the run dir
        if not os.environ.get("MLFLOW_TRACKING_URI") and run_dir is not None:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((Path(run_dir).resolve() / "mlruns").as_uri())
        self.own_run = mlflow.active_run() is None
        if self.own_run:
            mlflow.start_run(run_name=name)
        if config:
            mlflow.log_params({k: str(v)[:250] for k, v in config.items()})

    def log(self, rec: dict, step: int) -> None:
        self.mlflow.log_metrics(_numeric(rec), step=step)

    def close(self) -> None:
        if self.own_run:
            self.mlflow.end_run()


class WandB:
    def __init__(self, run_dir: Path | None, name: str, config: dict | None):
        try:
            import wandb
        except ImportError:
            raise ConfigError("train.report_to: wandb needs the wandb package: pip install wandb") from None
        self.run = wandb.init(project="obliviate", name=name, config=config or {},
                              dir=None if run_dir is None else str(run_dir), reinit=True)

    def log(self, rec: dict, step: int) -> None:
        self.run.log(_numeric(rec), step=step)

    def close(self) -> None:
        self.run.finish()


TRACKERS: dict[str, Callable] = {"tensorboard": TensorBoard, "mlflow": MLflow, "wandb": WandB}
"""Tracker name -> class taking ``(run_dir, run_name, config)`` with ``log(rec, step)`` and ``close()``."""


_DEFAULT: list[str] = []


def set_default_trackers(names) -> None:
    """Trackers every training loop of this process reports to unless its config says otherwise
    (``--log-with`` on the command line sets them for every command that trains)."""
    check_trackers(names)
    _DEFAULT[:] = list(names)


def default_trackers() -> list[str]:
    return list(_DEFAULT)


def check_trackers(names) -> None:
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ConfigError(f"config key 'report_to': unknown tracker(s) {', '.join(map(repr, unknown))} "
                          f"(valid: {', '.join(TRACKERS)})")


def open_trackers(names, run_dir: Path | None, name: str, config: dict | None = None) -> list:
    """The trackers ``names``, opened (a missing package or output directory is a ConfigError)."""
    check_trackers(names)
    opened = []
    try:
        for n in names:
            opened.append(TRACKERS[n](run_dir, name, config))
    except BaseException:
        close_trackers(opened)
        raise
    return opened


def close_trackers(trackers: list) -> None:
    for t in trackers:
        t.close()
