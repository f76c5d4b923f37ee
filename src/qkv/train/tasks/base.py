"""The interface every task implements, and what tasks share: text batches, data fingerprints,
the seeded generator of a batch's randomness."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from ...data.batching import TokenBatchSampler
from ...data.tokenizer import SubwordTokenizer
from ..recipe import TrainConfig

log = logging.getLogger("qkv.train")


@dataclass
class TextBatch:
    """A batch of a one-sequence task: inputs (B, T) and targets ((B, T) ids, or (B,) labels)
    right-padded; n_targets: the targets the loss sums over (non-pad tokens, or examples)."""

    inputs: Tensor
    targets: Tensor
    n_targets: int

    def to(self, device: torch.device | str) -> TextBatch:
        return TextBatch(self.inputs.to(device), self.targets.to(device), self.n_targets)


@dataclass
class TextData:
    """Encoded monolingual data: the tokenizer, training and validation ids (and labels)."""

    tokenizer: SubwordTokenizer
    train: list[list[int]]
    valid: list[list[int]]
    train_labels: list[int] = field(default_factory=list)
    valid_labels: list[int] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # class names, by class index


Examples = TypeVar("Examples")  # what `collate` takes: the ids of the examples (and labels)
BatchT = TypeVar("BatchT")  # what `collate` makes


class Task(Generic[Examples, BatchT]):
    """The part of training that depends on what is trained. Subclasses set the data in `prepare`
    and implement the rest."""

    noun = "training examples"  # for the log
    metrics: tuple[str, ...] = ("valid_loss", "valid_ppl")  # validation columns of log.csv
    unused_parameters = False  # the model has parameters this task's loss never reaches (DDP)
    data: Any

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg

    # --- data
    def prepare(self, out: Path, train_tokenizer: bool, tokenizer_dir: Path | None = None) -> None:
        """Load and encode the data; train the tokenizer into `out`, or load it from
        `tokenizer_dir` (default `out`)."""
        raise NotImplementedError

    @property
    def tokenizer(self) -> SubwordTokenizer:
        return self.data.tokenizer

    def train_lengths(self) -> tuple[list[int], list[int]]:
        """(source, target) lengths of the training examples, for the batch sampler."""
        raise NotImplementedError

    def valid_lengths(self) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def has_validation(self) -> bool:
        return bool(self.valid_lengths()[1])

    def epoch_examples(self, sampler: TokenBatchSampler) -> Examples:
        """The training examples of the sampler's epoch (what `collate` takes)."""
        return self.data.train

    def valid_examples(self) -> Examples:
        return self.data.valid

    def collate(self, examples: Examples, indices: list[int], key: Sequence[int]) -> BatchT:
        """The batch of examples[indices]; `key` (ints) seeds any randomness in it."""
        raise NotImplementedError

    def loss_inputs(self, batch: BatchT) -> tuple[Tensor, ...]:
        return batch.inputs, batch.targets  # type: ignore[attr-defined]

    def count(self, batch: BatchT) -> int:
        return batch.n_targets  # type: ignore[attr-defined]

    # --- model
    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def loss_module(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    def data_fingerprints(self) -> dict[str, str]:
        """A fingerprint of each part of the encoded data, by the recipe key that names it
        (train_src, valid_text, ...): a resumed run compares them with its checkpoint's."""
        raise NotImplementedError

    @property
    def classes(self) -> int:
        """How many values each prediction chooses among (tokens or labels): an untrained model's
        loss per prediction is about ln(classes)."""
        return self.tokenizer.src_vocab_size

    def extra_metrics(
        self, model: nn.Module, batches: list[list[int]], device: torch.device
    ) -> dict[str, float]:
        """Validation metrics beyond the loss (the loss is the trainer's)."""
        return {}

    def starts_trained(self) -> bool:
        """Whether the model starts from a trained one (the trainer then validates it first)."""
        return False

    def metadata(self) -> dict[str, Any]:
        """Keys for the model directory's config.json."""
        return {"task": self.cfg.task}


def fingerprint(*parts: Sequence[Sequence[int]]) -> str:
    """A short sha256 of lists of id sequences (their lengths and ids): what identifies data."""
    h = hashlib.sha256()
    for sequences in parts:
        lengths = np.array([len(x) for x in sequences], dtype=np.int64)
        flat = [i for x in sequences for i in x]
        h.update(lengths.tobytes())
        h.update(np.array(flat, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def key_generator(seed: int, key: Sequence[int]) -> torch.Generator:
    """A torch generator seeded from the recipe's seed and a batch's key (non-negative ints)."""
    state = np.random.SeedSequence([seed, *key]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
