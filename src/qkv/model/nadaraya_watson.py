"""Attention before Transformers: Nadaraya-Watson kernel regression (1964) as attention pooling
(d2l.ai, "Attention Pooling by Similarity").

Given training pairs (x_i, y_i) as keys and values, a query x is answered by a weighted average of
the values, the weights a kernel of the query-key distance normalised to sum to 1:

    f(x)     = sum_i alpha(x, x_i) y_i
    Gaussian kernel, non-parametric:  alpha(x, x_i) = softmax_i(-(x - x_i)^2 / 2)
    parametric, a learned width w:    alpha(x, x_i) = softmax_i(-((x - x_i) w)^2 / 2)

It is attention with score(q, k) = -((q - k) w)^2 / 2: a query attends to the keys near it, and w
sets how near (a larger w, a narrower kernel, a wigglier curve). The parametric form learns w by
gradient descent; trained with each training input as a query over the *other* training pairs
(`leave_one_out`), it picks the width that best predicts unseen points, since a query that sees its
own key would learn w -> inf and copy y_i. (The Gaussian's 1/sqrt(2 pi) cancels in the softmax.)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class NadarayaWatson(nn.Module):
    """queries (Q,), keys (N,), values (N,) -> predictions (Q,), weights (Q, N).

    learned_width=False: the non-parametric Gaussian kernel (w = 1, no parameters); True: w is a
    parameter, initialised to 1. mask (Q, N), bool, True = may attend."""

    def __init__(self, learned_width: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1)) if learned_width else None

    def forward(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        diff = queries[:, None] - keys[None, :]  # (Q, N)
        if self.w is not None:
            diff = diff * self.w
        scores = -(diff**2) / 2  # (Q, N)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)  # (Q, N), each row sums to 1
        return weights @ values, weights


def leave_one_out(n: int) -> Tensor:
    """The mask (n, n) under which training input i attends to every training pair but its own."""
    return ~torch.eye(n, dtype=torch.bool)


def toy_regression(n: int = 50, noise: float = 0.5, seed: int = 0) -> tuple[Tensor, Tensor]:
    """d2l's toy data: x uniform in [0, 5), sorted, y = 2 sin(x) + x^0.8 + N(0, noise^2) -> (x, y)
    (n,) each, float32; `toy_target(x)` is the noiseless curve."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, generator=g) * 5).sort().values
    return x, toy_target(x) + noise * torch.randn(n, generator=g)


def toy_target(x: Tensor) -> Tensor:
    return 2 * torch.sin(x) + x**0.8


def fit_width(
    model: NadarayaWatson, x: Tensor, y: Tensor, steps: int = 300, lr: float = 0.5
) -> list[float]:
    """Fit the parametric form's w by SGD on the leave-one-out loss mean((f(x_i) - y_i)^2) / 2;
    returns the loss of every step."""
    if model.w is None:
        raise ValueError("the non-parametric form has no width to fit")
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    mask, losses = leave_one_out(len(x)), []
    for _ in range(steps):
        prediction, _ = model(x, x, y, mask)
        loss = ((prediction - y) ** 2).mean() / 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


NOISE_FLOOR = 0.5**2 / 2  # the expected loss of the true curve under toy_regression's noise

__all__ = ["NadarayaWatson", "fit_width", "leave_one_out", "toy_regression", "toy_target"]
