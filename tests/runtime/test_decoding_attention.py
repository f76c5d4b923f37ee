"""The decoding attention kernels (`qkv.runtime.decoding_attention`) against the plain model and F.sdpa."""

from __future__ import annotations

import pytest
import torch

from qkv import Transformer, TransformerConfig
from qkv.model import AttentionWeights, MultiHeadedAttention
from qkv.model.masks import padding_mask
from qkv.runtime.decoding_attention import DecodingAttention, use_decoding_attention

S, D, H = 7, 32, 4


@pytest.mark.parametrize("n_kv_heads", [4, 2])
@pytest.mark.parametrize(("queries", "per_query_mask"), [(1, False), (3, False), (3, True)])
def test_few_queries_fast_path_equals_fused_kernel(n_kv_heads: int, queries: int, per_query_mask: bool) -> None:
    """Beam search over a batch decodes one query per row (or per beam, stacked) for B*H*T >= 512 query rows:
    that CPU path must equal F.sdpa, with a key-only padding mask or a per-query mask and a per-head bias."""
    mha = use_decoding_attention(MultiHeadedAttention(D, H, n_kv_heads=n_kv_heads)).eval()
    rows, Dh = 130, D // H  # 130 * 4 heads = 520 query rows at one query each
    q = torch.randn(rows, H, queries, Dh)
    k, v = torch.randn(rows, n_kv_heads, S, Dh), torch.randn(rows, n_kv_heads, S, Dh)
    ids = torch.ones(rows, S, dtype=torch.long)
    ids[::3, 4:] = 0
    ids[1] = 0  # a fully padded source row: zeros, as F.sdpa gives
    mask, bias = padding_mask(ids, 0), torch.randn(1, H, queries, S)
    if per_query_mask:  # (B, 1, T, S): query t also may not see the last t keys
        mask = mask & ~torch.ones(queries, S, dtype=torch.bool).tril(-1).flip(1)[None, None]
    fast, _ = mha.attend(q, k, v, mask, bias, need_weights=False)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")), scale=Dh**-0.5, enable_gqa=n_kv_heads != H)
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(fast[1] == 0)


def random_ids(rows: int, length: int, lengths: list[int] | None = None) -> torch.Tensor:
    ids = torch.randint(4, 40, (rows, length))
    for i, n in enumerate(lengths or []):
        ids[i, n:] = 0
    return ids


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_beams_sharing_a_memory_row_equal_the_plain_model(n_kv_heads: int | None) -> None:
    """g = 3 query rows per memory row (beam search's layout): the grouped product gives the plain model's
    logits (which repeats each memory row per beam) and weights, cached step by step and recomputed."""
    cfg = TransformerConfig.preset("tiny", src_vocab_size=40, dropout=0.0, attention_dropout=0.0,
                                   n_kv_heads=n_kv_heads)
    plain = Transformer(cfg).eval()
    fast = use_decoding_attention(Transformer(cfg).eval())
    fast.load_state_dict(plain.state_dict())
    assert any(type(m) is DecodingAttention for m in fast.modules())
    src = random_ids(2, 6, lengths=[6, 3])
    prefix = random_ids(6, 4)  # rows 0-2 read source 0, rows 3-5 source 1
    src_mask = padding_mask(src, 0)
    with torch.no_grad():
        memory = plain.encode(src, src_mask)
        plain_cache, fast_cache = plain.new_cache(), fast.new_cache()
        for t in range(4):
            want = plain.decode(prefix[:, t:t + 1], memory, src_mask, plain_cache)
            got = fast.decode(prefix[:, t:t + 1], memory, src_mask, fast_cache)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert fast_cache.cross_attn is not None and fast_cache.cross_attn[0].keys.size(0) == 2
        hidden, weights = fast.decoder(prefix, memory, src_mask, weights=AttentionWeights())
        hidden_plain, weights_plain = plain.decoder(prefix, memory, src_mask, weights=AttentionWeights())
    torch.testing.assert_close(hidden, hidden_plain, atol=1e-5, rtol=1e-5)
    for w, w_plain in zip(weights.cross + weights.decoder, weights_plain.cross + weights_plain.decoder, strict=True):
        assert w is not None and w_plain is not None
        torch.testing.assert_close(w, w_plain, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="cannot share"):
        fast.decode(random_ids(5, 1), memory, src_mask)
