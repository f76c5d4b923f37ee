"""Learning-rate schedules, as multipliers of a peak rate for `torch.optim.lr_scheduler.LambdaLR`.

    noam (paper eq. 3):  lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
                            = peak * min(step / warmup, sqrt(warmup / step)),
                         peak = (d_model * warmup)^-0.5
    inverse_sqrt:        the same shape (fairseq's name for it), with the peak given directly
    constant:            linear warm-up to the peak, then flat
    linear:              linear warm-up, then a straight line down to 0 at `total` updates
                         (budgeted training: the rate is annealed by the end of the run instead
                         of still being high when it stops)
    cosine:              linear warm-up, then half a cosine down to 0 at `total` updates
Steps count from 1 (the first optimizer update).
"""

from __future__ import annotations

import math
from collections.abc import Callable

SCHEDULES = ("noam", "inverse_sqrt", "constant", "linear", "cosine")
ANNEALED = ("linear", "cosine")  # these need the run's length (max_steps)


def paper_peak_lr(d_model: int, warmup: int) -> float:
    """The peak of the paper's schedule: d_model^-0.5 * warmup^-0.5 (7.0e-4 for base, warm-up
    4000)."""
    return 1.0 / math.sqrt(d_model * max(warmup, 1))


def lr_multiplier(schedule: str, warmup: int, total: int | None = None) -> Callable[[int], float]:
    """step (0-based count of updates done) -> factor applied to the peak lr for the next update.

    `total` (the run's max_steps) is where `linear` and `cosine` reach 0; the others ignore it.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose from {SCHEDULES}")
    warmup = max(warmup, 1)
    if schedule in ANNEALED and (total is None or total <= warmup):
        raise ValueError(
            f"schedule {schedule!r} decays to 0 at max_steps, which must exceed "
            f"warmup ({total} <= {warmup})"
        )

    def factor(done: int) -> float:
        step = done + 1
        if step <= warmup or schedule == "constant":
            return min(1.0, step / warmup)
        if schedule in ANNEALED:
            # 1 right after warm-up, 1 / (total - warmup) at the last update
            left = max(0.0, (total - done) / (total - warmup))
            return left if schedule == "linear" else 0.5 * (1.0 - math.cos(math.pi * left))
        return math.sqrt(warmup / step)

    return factor
