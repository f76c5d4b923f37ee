"""Learning curves: OUT/log.csv, one row per logged or validated step, and OUT/tensorboard/."""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..modeldir import atomic_write

TRAIN_FIELDS = ["step", "epoch", "lr", "train_loss", "train_ppl", "tokens_per_s"]


def log_fields(valid_metrics: tuple[str, ...]) -> list[str]:
    """The columns of log.csv for a task's validation metrics."""
    return [*TRAIN_FIELDS, *valid_metrics, "elapsed_s"]


LOG_FIELDS = log_fields(("valid_loss", "valid_ppl", "valid_bleu"))  # a translation run's


@dataclass
class TrainWindow:
    """Training sums since the last log row, and the row's training columns they give."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, loss: float, nll: float, tokens: int) -> None:
        self.loss += loss
        self.nll += nll
        self.tokens += tokens

    def columns(self, all_tokens: float) -> dict[str, float]:
        """Loss and perplexity per token of this rank; throughput of `all_tokens` (all ranks')."""
        per_token = max(self.tokens, 1)
        return {
            "train_loss": self.loss / per_token,
            "train_ppl": math.exp(min(self.nll / per_token, 50.0)),
            "tokens_per_s": all_tokens / max(time.perf_counter() - self.start, 1e-9),
        }


class TrainingLog:
    """Appends rows to OUT/log.csv (flushed at once) and, with `tensorboard`, to OUT/tensorboard/.

    A resumed run (`step` > 0) keeps the rows up to its checkpoint's step and drops the later ones
    (and a half-written last row of a killed run); the kept rows replace the log in one atomic
    rename, so a kill at any moment loses none of them.
    """

    def __init__(
        self, out: Path, step: int, tensorboard: bool, fields: list[str] = LOG_FIELDS
    ) -> None:
        self.path = out / "log.csv"
        kept = self._rows_up_to(step)

        def write_kept(tmp: Path) -> None:
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(kept)

        atomic_write(self.path, write_kept)
        self._file = open(self.path, "a", newline="")  # noqa: SIM115 - closed in close()
        self._csv = csv.DictWriter(self._file, fieldnames=fields, extrasaction="ignore")
        self._tensorboard: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge_step = step + 1 if step else None
            self._tensorboard = SummaryWriter(str(out / "tensorboard"), purge_step=purge_step)

    def _rows_up_to(self, step: int) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        with open(self.path, newline="") as f:
            return [
                row
                for row in csv.DictReader(f)
                if (row.get("step") or "").isdigit()
                and int(row["step"]) <= step
                and None not in row.values()  # a half-written row
            ]

    def write(self, row: dict[str, Any]) -> None:
        """One row of the log's fields (missing ones left empty); it must hold "step"."""
        self._csv.writerow(row)
        self._file.flush()
        if self._tensorboard is not None:
            for key, value in row.items():
                if key not in ("step", "epoch"):
                    self._tensorboard.add_scalar(key, value, row["step"])

    def close(self) -> None:
        self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
