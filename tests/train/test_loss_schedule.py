"""Loss and learning-rate schedule against hand computations and the paper's formula."""

from __future__ import annotations

import math

import pytest
import torch

from qkv.train.loss import label_smoothed_loss
from qkv.train.schedule import lr_multiplier, paper_peak_lr


def test_label_smoothed_loss_matches_float64_hand_computation() -> None:
    logits = torch.randn(2, 3, 5)
    target = torch.tensor([[1, 4, 0], [2, 0, 0]])  # 0 = pad, ignored
    eps = 0.1
    loss, nll = label_smoothed_loss(logits, target, pad_id=0, epsilon=eps)
    expected_loss = expected_nll = 0.0
    for b in range(2):
        for t in range(3):
            y = int(target[b, t])
            if y == 0:
                continue
            logp = torch.log_softmax(logits[b, t].double(), -1)
            expected_nll += -float(logp[y])
            expected_loss += (1 - eps) * -float(logp[y]) + eps * -float(logp.mean())
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-5)


def test_noam_schedule_is_the_papers_formula() -> None:
    d, warmup = 512, 4000
    peak = paper_peak_lr(d, warmup)
    f = lr_multiplier("noam", warmup)
    for step in (1, 10, 1000, 3999, 4000, 4001, 20000, 100000):
        paper = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert peak * f(step - 1) == pytest.approx(paper, rel=1e-9)
    assert peak == pytest.approx(6.99e-4, rel=1e-3)


def test_constant_schedule_warms_up_linearly() -> None:
    f = lr_multiplier("constant", 10)
    assert [f(i) for i in (0, 4, 9, 50)] == [0.1, 0.5, 1.0, 1.0]
    assert lr_multiplier("inverse_sqrt", 100)(399) == pytest.approx(math.sqrt(100 / 400))
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_multiplier("cosine", 10)
