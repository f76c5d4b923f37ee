"""Whole models against oracles: nn.Transformer with copied weights, causality, equivariance, the cache,
the paper's parameter counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from qkv import DecoderOnly, EncoderOnly, Transformer, TransformerConfig
from qkv.model import AttentionWeights, count_parameters
from qkv.model.cache import DecoderCache
from qkv.model.masks import padding_mask

POSITIONAL = ["sinusoidal", "learned", "rope", "relative", "alibi", "none"]


def tiny(**overrides: object) -> TransformerConfig:
    return TransformerConfig.preset("tiny", **{"src_vocab_size": 50, "dropout": 0.0, "attention_dropout": 0.0,
                                               **overrides})


def random_ids(B: int, T: int, vocab: int = 50, lengths: list[int] | None = None) -> torch.Tensor:
    ids = torch.randint(4, vocab, (B, T))
    for b, n in enumerate(lengths or []):
        ids[b, n:] = 0
    return ids


def copy_into_torch_transformer(model: Transformer) -> nn.Transformer:
    cfg = model.config
    ref = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
                         dropout=0.0, batch_first=True, norm_first=cfg.norm_first)
    ours = model.state_dict()
    for i, layer in enumerate(model.decoder.layers):  # cross-attention keeps q_proj and kv_proj apart
        ours[f"decoder.layers.{i}.cross_attn.in_proj.weight"], ours[f"decoder.layers.{i}.cross_attn.in_proj.bias"] = \
            layer.cross_attn.projection()
    mapping = {"self_attn.in_proj_weight": "self_attn.in_proj.weight",
               "self_attn.in_proj_bias": "self_attn.in_proj.bias",
               "multihead_attn.in_proj_weight": "cross_attn.in_proj.weight",
               "multihead_attn.in_proj_bias": "cross_attn.in_proj.bias",
               "multihead_attn.out_proj": "cross_attn.out_proj", "linear1": "feed_forward.w_1",
               "linear2": "feed_forward.w_2", "norm1": "self_attn_block.norm", "norm2": "NORM2"}
    new = {}
    for key in ref.state_dict():
        k = key
        for theirs, mine in mapping.items():
            k = k.replace(theirs, mine)
        k = k.replace("decoder.layers.", "DEC.").replace("encoder.layers.", "ENC.")
        if k.startswith("DEC."):  # norm2 follows cross-attention in a decoder layer, the FFN in an encoder
            k = k.replace("NORM2", "cross_attn_block.norm").replace("norm3", "ff_block.norm")
        k = k.replace("NORM2", "ff_block.norm")
        k = k.replace("DEC.", "decoder.layers.").replace("ENC.", "encoder.layers.")
        new[key] = ours[k] if k in ours else ref.state_dict()[key]  # post-norm: ref's final norms unused
    ref.load_state_dict(new)
    if not cfg.norm_first:  # nn.Transformer always ends its stacks with a LayerNorm; the paper does not
        ref.encoder.norm = None
        ref.decoder.norm = None
    return ref.eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_torch_transformer_with_copied_weights(norm_first: bool) -> None:
    model = Transformer(tiny(norm_first=norm_first, n_encoder_layers=3, n_decoder_layers=2)).eval()
    ref = copy_into_torch_transformer(model)
    src = random_ids(3, 9, lengths=[9, 5, 2])
    tgt = random_ids(3, 7, lengths=[7, 7, 4])
    with torch.no_grad():
        logits = model(src, tgt)
        src_emb = model.encoder.embed(src)
        tgt_emb = model.decoder.embed(tgt)
        T = tgt.size(1)
        hidden = ref(src_emb, tgt_emb, tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
                     src_key_padding_mask=src == 0, memory_key_padding_mask=src == 0,
                     tgt_key_padding_mask=tgt == 0, tgt_is_causal=True)
        expected = model.output_projection(hidden)
    real = tgt != 0  # padded target positions are never scored
    torch.testing.assert_close(logits[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_decoder_is_causal(positional: str) -> None:
    model = Transformer(tiny(positional=positional)).eval()
    src, tgt = random_ids(2, 6), random_ids(2, 8)
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(7):
            changed = tgt.clone()
            changed[:, t + 1:] = torch.randint(4, 50, changed[:, t + 1:].shape)
            out = model(src, changed)
            torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=1e-5, rtol=1e-5)
            assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])


@pytest.mark.parametrize("positional", POSITIONAL)
def test_encoder_permutation_equivariance_only_without_positions(positional: str) -> None:
    model = Transformer(tiny(positional=positional)).eval()
    src = random_ids(2, 8)
    perm = torch.randperm(8)
    with torch.no_grad():
        out, out_perm = model.encode(src), model.encode(src[:, perm])
    equivariant = torch.allclose(out[:, perm], out_perm, atol=1e-5)
    assert equivariant == (positional == "none")


def greedy(model: Transformer, src: torch.Tensor, steps: int, use_cache: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding returning the ids and each step's logits; cached or recomputing everything."""
    src_mask = padding_mask(src, model.config.pad_id)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), model.config.bos_id)
    cache = model.new_cache() if use_cache else None
    all_logits = []
    for _ in range(steps):
        inp = ys[:, -1:] if use_cache else ys
        logits = model.decode(inp, memory, src_mask, cache)[:, -1]
        all_logits.append(logits)
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    return ys, torch.stack(all_logits, 1)


@pytest.mark.parametrize("positional", POSITIONAL)
@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_cached_decoding_equals_full_recomputation(positional: str, n_kv_heads: int | None) -> None:
    model = Transformer(tiny(positional=positional, n_kv_heads=n_kv_heads, norm_first=True)).eval()
    src = random_ids(3, 7, lengths=[7, 4, 2])
    with torch.no_grad():
        ys_cached, logits_cached = greedy(model, src, steps=20, use_cache=True)
        ys_full, logits_full = greedy(model, src, steps=20, use_cache=False)
    assert torch.equal(ys_cached, ys_full)
    torch.testing.assert_close(logits_cached, logits_full, atol=1e-4, rtol=1e-4)


def test_cache_reorder_follows_beams() -> None:
    """After reordering the cache by beam indices, the next step equals recomputing the reordered prefixes."""
    model = Transformer(tiny()).eval()
    src = random_ids(4, 6).repeat_interleave(1, 0)
    src_mask = padding_mask(src, 0)
    prefix = random_ids(4, 5)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = model.new_cache()
        for t in range(5):
            model.decode(prefix[:, t:t + 1], memory, src_mask, cache)
        index = torch.tensor([2, 2, 0, 3])  # beam back-pointers (rows may repeat or vanish)
        cache.reorder(index, index)  # every row has its own memory row here
        nxt = random_ids(4, 1)
        stepped = model.decode(nxt, memory[index], src_mask[index], cache)[:, -1]
        full = model.decode(torch.cat([prefix[index], nxt], 1), memory[index], src_mask[index])[:, -1]
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)
    assert cache.length == 6


def test_cache_reorder_reuses_its_buffer_when_dropping_rows() -> None:
    """Dropping and permuting rows writes them back into the same self-attention buffer (no new buffer per step),
    and the steps after it (past the buffer's capacity, so it grows) still equal recomputing the prefixes."""
    model = Transformer(tiny()).eval()
    src, prefix = random_ids(4, 6), random_ids(4, 12)
    src_mask = padding_mask(src, 0)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = DecoderCache(len(model.decoder.layers), capacity=4)  # grows twice below
        for t in range(3):
            model.decode(prefix[:, t:t + 1], memory, src_mask, cache)
        buffers = [c._k.data_ptr() for c in cache.self_attn]
        index = torch.tensor([3, 1])  # two sentences finished, the others swap places
        cache.reorder(index, index)
        assert [c._k.data_ptr() for c in cache.self_attn] == buffers
        memory, src_mask, prefix = memory[index], src_mask[index], prefix[index]
        for t in range(3, 12):
            stepped = model.decode(prefix[:, t:t + 1], memory, src_mask, cache)[:, -1]
        full = model.decode(prefix, memory, src_mask)[:, -1]
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_beams_sharing_a_memory_row_equal_an_expanded_memory(n_kv_heads: int | None) -> None:
    """g = 3 query rows per memory row (beam search's layout) give the logits and cross-attention weights of
    repeating each memory row 3 times, cached step by step and recomputed; the cache holds one row per source."""
    model = Transformer(tiny(n_kv_heads=n_kv_heads)).eval()
    src = random_ids(2, 6, lengths=[6, 3])
    prefix = random_ids(6, 4)  # rows 0-2 read source 0, rows 3-5 source 1
    src_mask = padding_mask(src, 0)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        wide, wide_mask = memory.repeat_interleave(3, 0), src_mask.repeat_interleave(3, 0)
        shared, expanded = model.new_cache(), model.new_cache()
        for t in range(4):
            stepped = model.decode(prefix[:, t:t + 1], memory, src_mask, shared)
            want = model.decode(prefix[:, t:t + 1], wide, wide_mask, expanded)
            torch.testing.assert_close(stepped, want, atol=1e-5, rtol=1e-5)
        assert shared.cross_attn is not None and shared.cross_attn[0].keys.size(0) == 2
        assert shared.cross_attn[0].keys.is_contiguous()  # not a view into the fused projection: no copy per step
        hidden, weights = model.decoder(prefix, memory, src_mask, weights=AttentionWeights())
        hidden_wide, weights_wide = model.decoder(prefix, wide, wide_mask, weights=AttentionWeights())
    torch.testing.assert_close(hidden, hidden_wide, atol=1e-5, rtol=1e-5)
    for w, w_wide in zip(weights.cross, weights_wide.cross, strict=True):
        assert w is not None and w_wide is not None
        torch.testing.assert_close(w, w_wide, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="cannot share"):
        model.decode(random_ids(5, 1), memory, src_mask)


def test_parameter_counts_match_the_paper() -> None:
    """Paper, Table 3: base 65M, big 213M parameters (shared 37k BPE vocabulary, tied embeddings)."""
    base = count_parameters(TransformerConfig.preset("base", src_vocab_size=37000))
    big = count_parameters(TransformerConfig.preset("big", src_vocab_size=37000))
    assert abs(base - 65e6) / 65e6 < 0.05, base
    assert abs(big - 213e6) / 213e6 < 0.05, big
    # and the count is what the architecture implies, layer by layer
    d, f, V, N = 512, 2048, 37000, 6
    attn, ffn, norm = 4 * d * d + 4 * d, 2 * d * f + d + f, 2 * d
    assert base == V * d + N * (attn + ffn + 2 * norm) + N * (2 * attn + ffn + 3 * norm)


def test_weight_tying_options() -> None:
    tied = Transformer(tiny())
    assert tied.output_projection.weight is tied.decoder.embedding.weight is tied.encoder.embedding.weight
    untied = Transformer(tiny(share_embeddings=False, tie_output=False, tgt_vocab_size=60))
    assert untied.encoder.embedding.weight is not untied.decoder.embedding.weight
    assert untied.output_projection.weight is not untied.decoder.embedding.weight
    assert untied.output_projection.weight.shape == (60, 64)
    n_tied, n_untied = tied.num_parameters(), untied.num_parameters()
    assert n_untied - n_tied == 50 * 64 + 60 * 64 * 2 - 50 * 64


def test_pad_rows_stay_zero_and_fully_padded_inputs_are_finite() -> None:
    model = Transformer(tiny(dropout=0.1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    src = random_ids(3, 6, lengths=[6, 3, 0])  # the last source is entirely padding
    tgt = random_ids(3, 5, lengths=[5, 2, 1])
    logits = model(src, tgt[:, :-1])
    assert torch.isfinite(logits).all()
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    opt.step()
    assert torch.all(model.encoder.embedding.weight[0] == 0)
    assert model.encoder.embedding.weight[5].abs().sum() > 0


def test_embedding_scaled_and_pretrained() -> None:
    from qkv.model import TokenEmbedding

    emb = TokenEmbedding(10, 16, padding_idx=0)
    ids = torch.tensor([[3, 0]])
    torch.testing.assert_close(emb(ids)[0, 0], emb.weight[3] * 4.0)
    matrix = torch.randn(10, 16)
    frozen = TokenEmbedding.from_pretrained(matrix, padding_idx=0, freeze=True)
    assert not frozen.weight.requires_grad
    torch.testing.assert_close(frozen(ids)[0, 0], matrix[3])
    assert torch.all(frozen(ids)[0, 1] == 0)
    assert TokenEmbedding.from_pretrained(matrix, freeze=False).weight.requires_grad


def test_encoder_only_and_decoder_only() -> None:
    cfg = tiny()
    bert = EncoderOnly(cfg, n_classes=3).eval()
    ids = random_ids(2, 6, lengths=[6, 4])
    assert bert(ids).shape == (2, 6, 64)
    assert bert.masked_lm_logits(ids).shape == (2, 6, 50)
    assert bert.classify(ids).shape == (2, 3)
    gpt = DecoderOnly(cfg.replace(positional="rope")).eval()
    x = random_ids(2, 9)
    with torch.no_grad():
        full = gpt(x)
        changed = x.clone()
        changed[:, 5:] = 7
        torch.testing.assert_close(gpt(changed)[:, :5], full[:, :5])
        cache = gpt.new_cache()
        steps = torch.cat([gpt(x[:, t:t + 1], cache) for t in range(9)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    assert not any("cross_attn" in name for name, _ in gpt.named_parameters())


@pytest.mark.parametrize("activation,norm", [("gelu", "rmsnorm"), ("swiglu", "layernorm")])
def test_variants_train(activation: str, norm: str) -> None:
    model = Transformer(tiny(activation=activation, norm=norm, attention="additive"))
    src, tgt = random_ids(2, 5), random_ids(2, 6)
    logits = model(src, tgt[:, :-1])
    nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten()).backward()
    assert model.decoder.layers[0].feed_forward.w_1.weight.grad is not None
