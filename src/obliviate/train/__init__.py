"""The one training loop: pretraining, fine-tuning, unlearning and attacks all use it."""

from obliviate.train.config import TrainConfig
from obliviate.train.loop import TrainingDiverged, make_optimizer, select_trainable, train
from obliviate.train.sampler import StepSampler, make_lm_batches

__all__ = [
    "TrainConfig", "StepSampler", "TrainingDiverged", "make_lm_batches", "make_optimizer", "select_trainable",
    "train",
]
