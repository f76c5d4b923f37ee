"""Training: the recipe, data preparation, loss, schedules, the trainer loop, checkpoints, DDP."""

from .recipe import TrainConfig, load_train_config, parse_overrides
from .trainer import Trainer, TrainResult

__all__ = ["TrainConfig", "TrainResult", "Trainer", "load_train_config", "parse_overrides"]
