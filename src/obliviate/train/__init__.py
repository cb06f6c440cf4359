"""The one training loop: pretraining, fine-tuning, unlearning and attacks all use it."""

from obliviate.train.loop import StepSampler, TrainConfig, TrainingDiverged, select_trainable, train

__all__ = ["TrainConfig", "StepSampler", "TrainingDiverged", "select_trainable", "train"]
