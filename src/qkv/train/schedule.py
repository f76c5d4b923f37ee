"""Learning-rate schedules, as multipliers of a peak rate for `torch.optim.lr_scheduler.LambdaLR`.

    noam (paper eq. 3):  lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
                         = peak * min(step / warmup, sqrt(warmup / step)),  peak = (d_model * warmup)^-0.5
    inverse_sqrt:        the same shape (fairseq's name for it), with the peak given directly
    constant:            linear warm-up to the peak, then flat
Steps count from 1 (the first optimizer update).
"""

from __future__ import annotations

import math
from collections.abc import Callable

SCHEDULES = ("noam", "inverse_sqrt", "constant")


def paper_peak_lr(d_model: int, warmup: int) -> float:
    """The peak of the paper's schedule: d_model^-0.5 * warmup^-0.5 (7.0e-4 for base, warm-up 4000)."""
    return 1.0 / math.sqrt(d_model * max(warmup, 1))


def lr_multiplier(schedule: str, warmup: int) -> Callable[[int], float]:
    """step (0-based count of updates done) -> factor applied to the peak lr for the next update."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose from {SCHEDULES}")
    warmup = max(warmup, 1)

    def factor(done: int) -> float:
        step = done + 1
        if schedule == "constant":
            return min(1.0, step / warmup)
        return min(step / warmup, math.sqrt(warmup / step))

    return factor
