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
A run with a time budget (max_hours) re-plans `linear` and `cosine` at each validation to reach 0
where the budget is predicted to end it, if that comes before max_steps (`TimeBudget`).
Steps count from 1 (the first optimizer update).
"""

from __future__ import annotations

import math

SCHEDULES = ("noam", "inverse_sqrt", "constant", "linear", "cosine")
ANNEALED = ("linear", "cosine")  # these need the run's length (max_steps)


def paper_peak_lr(d_model: int, warmup: int) -> float:
    """The peak of the paper's schedule: d_model^-0.5 * warmup^-0.5 (7.0e-4 for base, warm-up
    4000)."""
    return 1.0 / math.sqrt(d_model * max(warmup, 1))


def lr_multiplier(schedule: str, warmup: int, total: int | None = None) -> Multiplier:
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
    return Multiplier(schedule, warmup, total or 0)


class Multiplier:
    """A schedule's factor per update. An annealed one decays from `anchor` (the end of warm-up,
    factor 1) to 0 at `end`; `replan` moves the end where a time budget predicts the run stops.
    Its attributes are plain numbers: LambdaLR keeps them in its state_dict, so a resumed run
    goes on from the same plan."""

    def __init__(self, schedule: str, warmup: int, total: int) -> None:
        self.schedule, self.warmup, self.total = schedule, warmup, total
        self.anchor, self.anchor_factor, self.end = warmup, 1.0, total

    def __call__(self, done: int) -> float:
        step = done + 1
        if step <= self.warmup or self.schedule == "constant":
            return min(1.0, step / self.warmup)
        if self.schedule in ANNEALED:
            # anchor_factor right after `anchor`, 0 at update `end`
            left = max(0.0, (self.end - done) / (self.end - self.anchor))
            shape = left if self.schedule == "linear" else 0.5 * (1.0 - math.cos(math.pi * left))
            return self.anchor_factor * shape
        return math.sqrt(self.warmup / step)

    def replan(self, done: int, end: int) -> None:
        """Decay to 0 at update `end` (at most max_steps) from the next update's factor on: the
        rate stays continuous. No effect on the schedules that do not decay to 0."""
        if self.schedule not in ANNEALED:
            return
        if done > self.anchor:
            self.anchor_factor, self.anchor = self(done), done
        self.end = max(min(end, self.total), self.anchor + 1)

    def resumed(self, total: int) -> None:
        """After a checkpoint's plan is loaded: max_steps as the resumed run sets it (a safe key
        to change). A plan no time budget moved decays to the new max_steps, as a fresh one
        would."""
        if self.end == self.total:
            self.end = total
        self.total = total
        if self.schedule in ANNEALED:
            self.end = max(min(self.end, total), self.anchor + 1)


class TimeBudget:
    """Rank 0's clock against max_hours, read at each validation: the run stops there when the
    next validation would come after the budget; else it goes on to the update where, at the
    pace since the previous validation, the budget ends (an annealed schedule's new end)."""

    def __init__(self, hours: float, every: int) -> None:
        self.seconds, self.every, self.last_s = 3600 * hours, every, 0.0

    def start(self, elapsed_s: float) -> None:
        """The loop (re)starts at `elapsed_s`: the first interval counts from there."""
        self.last_s = elapsed_s

    def end_step(self, step: int, elapsed_s: float) -> int:
        """The update the budget is predicted to end at: `step` itself when the run stops now.
        One interval past the last validation, so the rate is still above 0 there."""
        interval, self.last_s = elapsed_s - self.last_s, elapsed_s
        left = self.seconds - elapsed_s
        if interval > left:
            return step
        return step + self.every * (int(left // max(interval, 1e-9)) + 1)
