"""Training: data preparation, loss, schedules, the trainer loop, checkpoints, distributed helpers."""

from .recipe import TrainConfig, load_train_config, parse_overrides
from .trainer import Trainer, TrainResult

__all__ = ["TrainConfig", "TrainResult", "Trainer", "load_train_config", "parse_overrides"]
