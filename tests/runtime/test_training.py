"""The CPU training swaps (qkv.runtime.training) compute what the plain model computes."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from qkv import Transformer
from qkv.model import MultiHeadedAttention
from qkv.runtime.training import MaskDropout, keep_mask, prepare_for_training
from tiny_models import batch, random_sources, tiny_config


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mask_dropout_is_dropout(dtype: torch.dtype) -> None:
    p = 0.3
    drop = MaskDropout(p)
    x = torch.full((400, 500), 2.0, dtype=dtype, requires_grad=True)
    y = drop(x)
    assert y.dtype == dtype
    kept = y != 0
    # 200,000 Bernoulli(0.7) draws: the kept share within 5 standard deviations (0.005)
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005
    assert torch.equal(y[kept], torch.full_like(y[kept], 2.0 / (1 - p)))  # the rest scaled
    y.sum().backward()
    assert torch.equal(x.grad, kept.to(dtype) / (1 - p))  # the gradient: mask / (1 - p)
    # each element kept independently: no correlation between neighbours
    k = kept.float()
    assert abs((k[:, 1:] * k[:, :-1]).mean().item() - (1 - p) ** 2) < 0.006
    drop.eval()
    assert drop(x) is x
    assert torch.equal(MaskDropout(1.0)(x), torch.zeros_like(x))
    assert MaskDropout(0.0)(x) is x


@pytest.mark.parametrize("shape", [(400, 500), (3, 7, 11)])
def test_every_lane_of_a_draw_keeps_with_probability_1_minus_p(shape: tuple[int, ...]) -> None:
    # four masks elements come from one 64-bit draw: each of the four positions (and an odd
    # count's last, partial draw) keeps 1 - p of the time, including the draw's top lane
    p = 0.25
    kept, n = torch.zeros(4), torch.zeros(4)
    lane = torch.arange(torch.Size(shape).numel()) % 4
    for seed in range(200_000 // len(lane) + 1):
        torch.manual_seed(seed)
        mask = keep_mask(torch.Size(shape), p, torch.device("cpu"))
        assert mask.shape == shape and mask.dtype == torch.bool
        kept += torch.bincount(lane, mask.flatten().float(), minlength=4)
        n += torch.bincount(lane, minlength=4)
    # >= 50,000 Bernoulli(0.75) draws per lane: within 5 standard deviations (0.0097)
    assert torch.allclose(kept / n, torch.full((4,), 1 - p), atol=0.0097), kept / n
    assert keep_mask(torch.Size([1000]), 0.0, torch.device("cpu")).all()


def test_mask_dropout_follows_the_seed() -> None:
    x = torch.randn(64, 32)
    torch.manual_seed(5)
    a = MaskDropout(0.5)(x)
    torch.manual_seed(5)
    assert torch.equal(MaskDropout(0.5)(x), a)
    assert not torch.equal(MaskDropout(0.5)(x), a)


def model_and_batch(dropout: float) -> tuple[Transformer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = Transformer(tiny_config(dropout=dropout))
    src = batch(random_sources(6, seed=1))
    tgt = batch(random_sources(6, seed=2))
    return model, src, tgt


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_swaps_on_the_cpu(precision: str) -> None:
    model, _, _ = model_and_batch(dropout=0.1)
    notes = prepare_for_training(model, precision, torch.device("cpu"))
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert drops and all(type(m) is MaskDropout for m in drops)
    attention = [m for m in model.modules() if isinstance(m, MultiHeadedAttention)]
    assert all(m.fused == (precision == "fp32") for m in attention)  # bf16: the readable path
    assert len(notes) == (2 if precision == "bf16" else 1)
    other, _, _ = model_and_batch(dropout=0.1)
    assert prepare_for_training(other, precision, torch.device("cuda")) == []  # the CPU only
    assert all(type(m) is nn.Dropout for m in other.modules() if isinstance(m, nn.Dropout))


def test_bf16_readable_attention_trains_as_the_fused_kernel() -> None:
    """Under bf16 autocast, loss and gradients of the prepared model equal the plain model's
    (dropout 0: the same function) within bf16 rounding."""
    plain, src, tgt = model_and_batch(dropout=0.0)
    prepared = copy.deepcopy(plain)
    prepare_for_training(prepared, "bf16", torch.device("cpu"))
    grads = []
    for model in (plain, prepared):
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
        loss.backward()
        grads.append((loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    (loss_a, grad_a), (loss_b, grad_b) = grads
    assert loss_a == pytest.approx(loss_b, rel=1e-2)
    cosine = F.cosine_similarity(grad_a, grad_b, dim=0).item()
    assert cosine > 0.99
