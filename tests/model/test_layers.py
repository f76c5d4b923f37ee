"""Feed-forward, norms and the residual connection against their formulas."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qkv.model import PositionwiseFeedForward, SublayerConnection
from qkv.model.layers import make_norm


def test_feed_forward_formulas() -> None:
    x = torch.randn(2, 3, 8)
    relu = PositionwiseFeedForward(8, 16, "relu")
    w1, b1, w2, b2 = relu.w_1.weight, relu.w_1.bias, relu.w_2.weight, relu.w_2.bias
    torch.testing.assert_close(relu(x), torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2)
    gelu = PositionwiseFeedForward(8, 16, "gelu")
    h = x @ gelu.w_1.weight.T + gelu.w_1.bias
    torch.testing.assert_close(gelu(x), 0.5 * h * (1 + torch.erf(h / 2**0.5)) @ gelu.w_2.weight.T + gelu.w_2.bias)
    swiglu = PositionwiseFeedForward(8, 16, "swiglu", bias=False)
    w, v = swiglu.w_1.weight[:16], swiglu.w_1.weight[16:]
    a = x @ w.T
    torch.testing.assert_close(swiglu(x), (a * torch.sigmoid(a) * (x @ v.T)) @ swiglu.w_2.weight.T)


def test_rmsnorm_and_layernorm() -> None:
    x = torch.randn(4, 8) * 3 + 1
    rms = make_norm("rmsnorm", 8, 1e-6)
    torch.testing.assert_close(rms(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    ln = make_norm("layernorm", 8, 1e-5)
    torch.testing.assert_close(ln(x), (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False,
                                                                                        keepdim=True) + 1e-5))


def test_sublayer_connection_pre_and_post() -> None:
    x = torch.randn(2, 3, 8)
    f = torch.nn.Linear(8, 8)
    post = SublayerConnection(8, 0.0, norm_first=False).eval()
    pre = SublayerConnection(8, 0.0, norm_first=True).eval()
    torch.testing.assert_close(post(x, f), F.layer_norm(x + f(x), (8,)))
    torch.testing.assert_close(pre(x, f), x + f(F.layer_norm(x, (8,))))


def test_a_feed_forward_of_width_zero_adds_only_its_bias() -> None:
    """d_ff 0, the FFN ablation of benchmarks/variants.py: the sub-layer's output is b_2 whatever
    its input, and a model of that config trains (its gradients reach the bias)."""
    import pytest

    from qkv.config import TransformerConfig
    from qkv.model.transformer import Transformer

    ff = PositionwiseFeedForward(8, 0)
    torch.nn.init.normal_(ff.w_2.bias)
    x = torch.randn(2, 3, 8)
    assert torch.equal(ff(x), ff.w_2.bias.expand(2, 3, 8))
    cfg = TransformerConfig.preset("tiny", d_ff=0, src_vocab_size=20, tgt_vocab_size=20)
    model = Transformer(cfg)
    ids = torch.randint(4, 20, (2, 5))
    model(ids, ids).sum().backward()
    assert model.encoder.layers[0].feed_forward.w_2.bias.grad is not None
    with pytest.raises(ValueError, match="d_ff must be >= 0"):
        TransformerConfig.preset("tiny", d_ff=-1)
