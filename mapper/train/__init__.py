"""The train stage: a training step of the engine's mapped forward (backward, recompute, optimizer, parallelism,
memory), above the pipeline beside serving (`mapper train`)."""

from mapper.train.options import TrainOptions
from mapper.train.step import train_step
from mapper.train.totals import FLOP_CONVENTION, TrainingResult, TrainTotals

__all__ = ["FLOP_CONVENTION", "TrainOptions", "TrainTotals", "TrainingResult", "train_step"]
