"""Attention against independent oracles: a float64 hand computation, nn.MultiheadAttention, the per-head loop."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from qkv.model import (
    MultiHeadedAttention,
    attention,
    per_head_attention,
    scaled_dot_product_attention,
)
from qkv.model.attention import AdditiveScore, BilinearScore, softmax_attention
from qkv.model.masks import padding_mask

B, T, S, D, H = 3, 5, 7, 32, 4


def hand_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V with explicit loops and exp, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros(*q.shape[:-1], v.size(-1), dtype=torch.float64)
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            for i in range(q.size(2)):
                allowed = [j for j in range(k.size(2)) if keep is None or keep[b, j]]
                s = [float(q[b, h, i] @ k[b, h, j]) / math.sqrt(q.size(-1)) for j in allowed]
                m = max(s)
                e = [math.exp(x - m) for x in s]
                for w, j in zip(e, allowed, strict=True):
                    out[b, h, i] += w / sum(e) * v[b, h, j]
    return out


def test_scaled_dot_product_matches_float64_hand_computation() -> None:
    q, k, v = torch.randn(2, H, T, 8), torch.randn(2, H, S, 8), torch.randn(2, H, S, 8)
    keep = torch.ones(2, S, dtype=torch.bool)
    keep[1, 4:] = False
    expected = hand_attention(q, k, v, keep)
    mask = keep[:, None, None, :]
    ours, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(ours.double(), expected, atol=1e-5, rtol=1e-5)
    mha = MultiHeadedAttention(8 * H, H)  # the fused (F.sdpa) path inside the module
    fused, _ = mha.attend(q, k, v, mask, None, need_weights=False)
    torch.testing.assert_close(fused.double(), expected, atol=1e-5, rtol=1e-5)


def copy_to_torch_mha(ours: MultiHeadedAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    with torch.no_grad():
        weight, bias = ours.projection()  # [W^Q; W^K; W^V] from in_proj, or from q_proj + kv_proj
        ref.in_proj_weight.copy_(weight)
        ref.in_proj_bias.copy_(bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("with_padding", [False, True])
def test_multi_head_attention_equals_torch(cross: bool, with_padding: bool) -> None:
    ours = MultiHeadedAttention(D, H, cross=cross).eval()
    ref = copy_to_torch_mha(ours)
    x = torch.randn(B, T, D)
    mem = torch.randn(B, S, D) if cross else x
    ids = torch.ones(B, mem.size(1), dtype=torch.long)
    if with_padding:
        ids[0, -2:] = 0
        ids[2, 1:] = 0
    mask = padding_mask(ids, 0)  # (B, 1, 1, S), True = may attend
    out, w = ours(x, mem if cross else None, mask=mask, need_weights=True)
    fast, _ = ours(x, mem if cross else None, mask=mask)
    ref_out, ref_w = ref(
        x, mem, mem, key_padding_mask=(ids == 0), need_weights=True, average_attn_weights=True
    )
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.mean(dim=1), ref_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_per_head_reference_equals_fused(n_kv_heads: int) -> None:
    ours = MultiHeadedAttention(D, H, n_kv_heads=n_kv_heads).eval()
    cross = MultiHeadedAttention(D, H, n_kv_heads=n_kv_heads, cross=True).eval()
    x, mem = torch.randn(B, T, D), torch.randn(B, S, D)
    ids = torch.ones(B, S, dtype=torch.long)
    ids[1, 3:] = 0
    mask = padding_mask(ids, 0)
    torch.testing.assert_close(
        cross(x, mem, mask=mask)[0], per_head_attention(cross, x, mem, mask), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(ours(x)[0], per_head_attention(ours, x), atol=1e-5, rtol=1e-5)


def test_grouped_query_equals_full_heads_with_shared_kv() -> None:
    """GQA with 2 kv heads == 4-head attention whose key/value heads come in identical pairs."""
    gqa = MultiHeadedAttention(D, H, n_kv_heads=2).eval()
    full = MultiHeadedAttention(D, H).eval()
    Dh = D // H
    with torch.no_grad():
        wq, wk, wv = gqa.in_proj.weight.split([D, 2 * Dh, 2 * Dh])
        bq, bk, bv = gqa.in_proj.bias.split([D, 2 * Dh, 2 * Dh])

        def dup(t: torch.Tensor) -> torch.Tensor:
            return (
                t.view(2, Dh, *t.shape[1:])
                .repeat_interleave(2, dim=0)
                .reshape(4 * Dh, *t.shape[1:])
            )

        full.in_proj.weight.copy_(torch.cat([wq, dup(wk), dup(wv)]))
        full.in_proj.bias.copy_(torch.cat([bq, dup(bk), dup(bv)]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(B, T, D)
    torch.testing.assert_close(gqa(x)[0], full(x)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gqa(x, need_weights=True)[0], full(x)[0], atol=1e-5, rtol=1e-5)


def test_score_functions_reduce_to_known_cases() -> None:
    x = torch.randn(B, T, D)
    scaled = MultiHeadedAttention(D, H).eval()
    dot = MultiHeadedAttention(D, H, score="dot", temperature=math.sqrt(D // H)).eval()
    bilinear = MultiHeadedAttention(D, H, score="bilinear").eval()
    for m in (dot, bilinear):
        m.in_proj.load_state_dict(scaled.in_proj.state_dict())
        m.out_proj.load_state_dict(scaled.out_proj.state_dict())
    assert isinstance(bilinear.score, BilinearScore)
    with torch.no_grad():  # W = I / sqrt(d_k): the bilinear score is the scaled dot product
        bilinear.score.weight.copy_(torch.eye(D // H).expand(H, -1, -1) / math.sqrt(D // H))
    torch.testing.assert_close(dot(x)[0], scaled(x)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bilinear(x)[0], scaled(x)[0], atol=1e-5, rtol=1e-5)
    hotter = MultiHeadedAttention(D, H, temperature=2.0).eval()
    hotter.load_state_dict(scaled.state_dict())
    assert not torch.allclose(hotter(x)[0], scaled(x)[0], atol=1e-4)


@pytest.mark.parametrize("need_weights", [False, True])
def test_the_readable_path_is_the_paper_literal_function(
    monkeypatch: pytest.MonkeyPatch, need_weights: bool
) -> None:
    """With the fused kernel off (or the weights asked for), `attend` runs `scaled_dot_product_attention`, the
    paper's equation as written, once per call, with the temperature in its scale."""
    calls: list[float | None] = []
    literal = attention.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(args[6] if len(args) > 6 else kwargs.get("scale"))
        return literal(*args, **kwargs)

    monkeypatch.setattr(attention, "scaled_dot_product_attention", counted)
    mha = MultiHeadedAttention(D, H, temperature=2.0).eval()
    x = torch.randn(B, T, D)
    fused, _ = mha(x)
    assert calls == []
    mha.fused = (
        need_weights  # readable either way: the kernel switched off, or the weights asked for
    )
    readable, _ = mha(x, need_weights=need_weights)
    assert calls == [pytest.approx((D // H) ** -0.5 / 2.0)]
    torch.testing.assert_close(readable, fused, atol=1e-5, rtol=1e-5)


def test_additive_score_matches_float64_loop() -> None:
    score = AdditiveScore(n_heads=2, d_head=3)
    q, k = torch.randn(1, 2, 2, 3), torch.randn(1, 2, 4, 3)
    got = score(q, k).detach().double()
    wq, wk, v = score.w_q.detach().double(), score.w_k.detach().double(), score.v.detach().double()
    for h in range(2):
        for i in range(2):
            for j in range(4):
                expected = v[h] @ torch.tanh(
                    q[0, h, i].double() @ wq[h] + k[0, h, j].double() @ wk[h]
                )
                assert abs(float(got[0, h, i, j] - expected)) < 1e-5


def test_explicit_path_equals_fused_path_with_bias_and_mask() -> None:
    mha = MultiHeadedAttention(D, H, n_kv_heads=2).eval()
    x = torch.randn(B, T, D)
    bias = torch.randn(1, H, T, T)
    mask = torch.rand(B, 1, T, T) > 0.3
    mask[..., 0] = True
    fused, none = mha(x, mask=mask, bias=bias)
    explicit, w = mha(x, mask=mask, bias=bias, need_weights=True)
    assert none is None and w is not None
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    assert torch.all(w.masked_select(~mask.expand_as(w)) == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T))


def test_fully_masked_rows_are_zero_and_gradients_finite() -> None:
    q = torch.randn(2, H, T, 8, requires_grad=True)
    k, v = torch.randn(2, H, S, 8), torch.randn(2, H, S, 8)
    mask = torch.ones(2, 1, 1, S, dtype=torch.bool)
    mask[1] = False  # a fully padded sequence
    out, w = softmax_attention(q @ k.transpose(-2, -1), v, mask)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert torch.all(out[1] == 0) and torch.all(w[1] == 0)
    assert torch.isfinite(out[0]).all() and out[0].abs().sum() > 0


def test_self_and_cross_attention_refuse_the_other_call() -> None:
    x, mem = torch.randn(B, T, D), torch.randn(B, S, D)
    with pytest.raises(ValueError, match="cross=True"):
        MultiHeadedAttention(D, H)(x, mem)
    with pytest.raises(ValueError, match="pass memory"):
        MultiHeadedAttention(D, H, cross=True)(x)
