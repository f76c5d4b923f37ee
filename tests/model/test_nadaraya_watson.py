"""Nadaraya-Watson kernel regression as attention: the weights and predictions against a float64
hand computation, and the parametric form's width fitted on d2l's toy regression."""

from __future__ import annotations

import math

import pytest
import torch

from qkv.model.nadaraya_watson import (
    NOISE_FLOOR,
    NadarayaWatson,
    fit_width,
    leave_one_out,
    toy_regression,
    toy_target,
)


def hand(queries: list[float], keys: list[float], values: list[float], w: float = 1.0,
         skip_self: bool = False) -> tuple[list[float], list[list[float]]]:
    """f(x) = sum_i exp(-((x - x_i) w)^2 / 2) y_i / sum_j exp(-((x - x_j) w)^2 / 2), by loops."""
    predictions, rows = [], []
    for q, query in enumerate(queries):
        kernel = [0.0 if skip_self and i == q else math.exp(-(((query - k) * w) ** 2) / 2)
                  for i, k in enumerate(keys)]
        total = sum(kernel)
        rows.append([k / total for k in kernel])
        predictions.append(sum(a * v for a, v in zip(rows[-1], values, strict=True)))
    return predictions, rows


@pytest.mark.parametrize("w", [None, 2.5])
def test_weights_and_predictions_equal_a_float64_hand_computation(w: float | None) -> None:
    x, y = toy_regression(12, seed=3)
    queries = torch.tensor([0.0, 0.7, 2.5, 4.9])
    model = NadarayaWatson(learned_width=w is not None).double()
    if w is not None:
        with torch.no_grad():
            model.w.fill_(w)
    pred, weights = model(queries.double(), x.double(), y.double())
    want_pred, want_weights = hand(queries.tolist(), x.tolist(), y.tolist(), w or 1.0)
    torch.testing.assert_close(weights, torch.tensor(want_weights, dtype=torch.float64))
    torch.testing.assert_close(pred, torch.tensor(want_pred, dtype=torch.float64))
    assert weights.shape == (4, 12) and torch.allclose(weights.sum(-1), torch.ones(4).double())


def test_leave_one_out_gives_a_query_no_weight_on_its_own_key() -> None:
    x, y = toy_regression(10, seed=1)
    pred, weights = NadarayaWatson().double()(x.double(), x.double(), y.double(), leave_one_out(10))
    assert torch.all(weights.diagonal() == 0)
    want_pred, want_weights = hand(x.tolist(), x.tolist(), y.tolist(), skip_self=True)
    torch.testing.assert_close(weights, torch.tensor(want_weights, dtype=torch.float64))
    torch.testing.assert_close(pred, torch.tensor(want_pred, dtype=torch.float64))


def test_the_parametric_form_fits_the_toy_regression() -> None:
    """300 SGD steps on the leave-one-out loss. No predictor beats the noise (expected loss
    NOISE_FLOOR = 0.125 for the true curve); the fitted width must come within 1.5x of it, while the
    non-parametric w = 1, a kernel too wide for a sine of period 2 pi, stays above 2x."""
    torch.manual_seed(0)
    x, y = toy_regression(50, seed=0)
    with torch.no_grad():
        fixed, _ = NadarayaWatson()(x, x, y, leave_one_out(50))
    fixed_loss = float(((fixed - y) ** 2).mean() / 2)
    model = NadarayaWatson(learned_width=True)
    losses = fit_width(model, x, y, steps=300)
    assert losses[0] == pytest.approx(fixed_loss, rel=1e-5)  # starts at w = 1
    assert fixed_loss > 2 * NOISE_FLOOR
    assert losses[-1] < 1.5 * NOISE_FLOOR
    assert model.w.item() > 2  # a narrower kernel than the non-parametric one
    grid = torch.arange(0, 5, 0.1)  # d2l's test inputs: closer to the noiseless curve than w = 1
    with torch.no_grad():
        error_fitted = ((model(grid, x, y)[0] - toy_target(grid)) ** 2).mean()
        error_fixed = ((NadarayaWatson()(grid, x, y)[0] - toy_target(grid)) ** 2).mean()
    assert error_fitted < 0.1 < 0.3 < error_fixed


def test_the_non_parametric_form_has_no_width_to_fit() -> None:
    with pytest.raises(ValueError, match="no width"):
        fit_width(NadarayaWatson(), torch.zeros(3), torch.zeros(3))
