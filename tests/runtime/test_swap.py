"""The one swap mechanism (`qkv.runtime.swap`): replacements set on their parents, sharing the
replaced module's tensors and leaving it as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from qkv import Transformer
from qkv.model import MultiHeadedAttention
from qkv.runtime.decoding_attention import DecodingAttention, use_decoding_attention
from qkv.runtime.swap import rebuilt_as, replace_modules
from qkv.runtime.training import MaskDropout
from tiny_models import tiny_config


def test_replace_modules_sets_one_replacement_on_every_parent() -> None:
    """Every module of the class exactly (a subclass stays), nested or shared; a shared module gets one
    replacement in all its places; the model itself is replaced when it is one."""
    shared, own, already = nn.Dropout(0.1), nn.Dropout(0.2), MaskDropout(0.3)
    model = nn.Sequential(shared, nn.Sequential(own, shared), already)
    model.again = shared  # a second name in the same parent
    assert replace_modules(model, nn.Dropout, lambda d: MaskDropout(d.p)) is model
    first, inner, kept = model[0], model[1], model[2]
    assert type(first) is MaskDropout and first.p == 0.1
    assert inner[1] is first and model.again is first  # one replacement for the shared module
    assert type(inner[0]) is MaskDropout and inner[0].p == 0.2
    assert kept is already
    alone = nn.Dropout(0.5)
    root = replace_modules(alone, nn.Dropout, lambda d: MaskDropout(d.p))
    assert type(root) is MaskDropout and type(alone) is nn.Dropout


def test_rebuilt_as_shares_the_tensors_and_leaves_the_original_as_it_was() -> None:
    plain = MultiHeadedAttention(32, 4, n_kv_heads=2, cross=True, temperature=0.5)
    plain.fused = False
    fast = rebuilt_as(plain, DecodingAttention)
    assert type(plain) is MultiHeadedAttention and type(fast) is DecodingAttention
    assert fast.q_proj is plain.q_proj and fast.kv_proj.weight is plain.kv_proj.weight
    assert (fast.n_kv_heads, fast.temperature, fast.fused) == (2, 0.5, False)
    assert list(fast.state_dict()) == list(plain.state_dict())
    fast.out_proj = nn.Linear(32, 32)  # its own registry: the original keeps its module
    assert plain.out_proj is not fast.out_proj
    with pytest.raises(TypeError, match="not a subclass"):
        rebuilt_as(nn.Linear(2, 2), DecodingAttention)


def test_use_decoding_attention_replaces_every_attention_with_the_same_weights() -> None:
    model = Transformer(tiny_config()).eval()
    plain = [m for m in model.modules() if type(m) is MultiHeadedAttention]
    tensors = {p.data_ptr() for p in model.parameters()}
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt = torch.tensor([[2, 5, 6], [2, 7, 0]])
    with torch.no_grad():
        want = model(src, tgt)
        assert use_decoding_attention(model) is model
        got = model(src, tgt)
    attention = [m for m in model.modules() if isinstance(m, MultiHeadedAttention)]
    assert len(attention) == len(plain) and all(type(m) is DecodingAttention for m in attention)
    assert all(type(m) is MultiHeadedAttention for m in plain)  # the replaced ones as they were
    assert {p.data_ptr() for p in model.parameters()} == tensors
    assert use_decoding_attention(model) is model  # a second call finds nothing to replace
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
