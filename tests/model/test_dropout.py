"""Dropout against its formula, against nn.Dropout's statistics, and through autograd."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from qkv.config import TransformerConfig
from qkv.model import Dropout, Transformer


def test_dropout_is_the_formula_with_a_uniform_mask() -> None:
    x = torch.randn(4, 5, 6, dtype=torch.float64)
    drop = Dropout(0.3).train()
    torch.manual_seed(7)
    out = drop(x)
    torch.manual_seed(7)
    keep = torch.rand_like(x) >= 0.3  # m ~ Bernoulli(0.7)
    torch.testing.assert_close(out, torch.where(keep, x / 0.7, torch.zeros_like(x)), rtol=1e-15, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_matches_nn_dropout_in_distribution(p: float) -> None:
    x = torch.ones(1000, 1000)
    sigma = (p * (1 - p) / x.numel()) ** 0.5  # binomial standard error of the drop rate
    for module in (Dropout(p), nn.Dropout(p)):
        out = module.train()(x)
        assert abs(float((out == 0).float().mean()) - p) < 6 * sigma, module
        torch.testing.assert_close(out[out != 0], torch.full_like(out[out != 0], 1 / (1 - p)))
        assert abs(float(out.mean()) - 1.0) < 6 * sigma / (1 - p) + 1e-6  # E[Dropout(x)] = x


def test_dropout_gradient_is_the_scaled_mask() -> None:
    x = torch.randn(300, 40, requires_grad=True)
    out = Dropout(0.25).train()(x)
    out.sum().backward()
    mask = (out != 0).float() / 0.75
    torch.testing.assert_close(x.grad, mask)
    torch.testing.assert_close(out, x.detach() * mask)


def test_dropout_edges_and_eval() -> None:
    x = torch.randn(8, 16, requires_grad=True)
    assert Dropout(0.5).eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    zeros = Dropout(1.0).train()(x)
    assert torch.count_nonzero(zeros) == 0
    zeros.sum().backward()
    assert torch.count_nonzero(x.grad) == 0
    first, second = Dropout(0.5).train()(x), Dropout(0.5).train()(x)
    assert not torch.equal(first, second)  # a fresh mask per call


def test_model_uses_dropout_everywhere_and_is_deterministic_in_eval() -> None:
    cfg = TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, d_ff=32, n_heads=2,
                            n_encoder_layers=1, n_decoder_layers=1, dropout=0.5)
    model = Transformer(cfg)
    kinds = {type(m) for m in model.modules() if isinstance(m, nn.Dropout)}
    assert kinds == {Dropout}
    src, tgt = torch.randint(3, 20, (2, 5)), torch.randint(3, 20, (2, 4))
    model.train()
    assert not torch.equal(model(src, tgt), model(src, tgt))
    model.eval()
    torch.testing.assert_close(model(src, tgt), model(src, tgt), rtol=0, atol=0)
