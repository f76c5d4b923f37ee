"""One sentence through an encoder-decoder Transformer, step by step, as a Markdown page: every
tensor's shape and a few of its numbers, printed from the tensors the model's own modules compute
(`qkv explain`, docs/walkthrough.md).

    page = walkthrough(model, src_ids, tgt_ids, src_pieces, tgt_pieces)   # Markdown lines

The steps: tokens -> ids -> embedding (x sqrt(D)) -> + positions -> the first encoder layer in
detail (Q, K, V per head; scores / sqrt(Dh); softmax; heads concatenated and projected; residual
and norm; the feed-forward network; residual and norm) -> the other layers -> the memory -> the
decoder's first layer (the causal mask, self-attention, cross-attention over the memory, FFN) ->
logits -> the next token. What is computed by hand here (scores, softmax, concatenation) is checked
against what the modules return, and the logits against `model(src, tgt)`: the page cannot show a
computation the model does not do.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..model import Transformer
from ..model.attention import MultiHeadedAttention
from ..model.layers import DecoderLayer, EncoderLayer, SublayerConnection
from ..model.masks import causal_mask

SHOWN = 4  # numbers shown per vector


class Page:
    """Markdown lines: prose, and blocks of tensors (shape, then a few numbers)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str, text: str, where: str) -> None:
        self.lines += ["", f"## {title}", "", text, "", where, ""]

    def tensors(self, *named: tuple[str, Tensor]) -> None:
        """Shapes and numbers, in the code block just written if the page ends with one."""
        if self.lines and self.lines[-1] == "```" and self.lines.count("```") % 2 == 0:
            self.lines.pop()
        else:
            self.lines.append("```")
        for name, t in named:
            self.lines.append(f"{name:<26} {tuple(t.shape)}  {_numbers(t)}")
        self.lines.append("```")


def _numbers(t: Tensor) -> str:
    """The first SHOWN values of the tensor's first row, two decimals."""
    row = t.detach().float()
    while row.dim() > 1:
        row = row[0]
    values = ", ".join(f"{v:.2f}" for v in row[:SHOWN].tolist())
    return f"[{values}{', ...' if row.numel() > SHOWN else ''}]"


def _link(name: str, path: str) -> str:
    return f"[`{name}`](../{path})"


@torch.no_grad()
def walkthrough(
    model: Transformer,
    src_ids: list[int],
    tgt_ids: list[int],
    src_vocabulary: list[str],
    tgt_vocabulary: list[str],
) -> list[str]:
    """The page (Markdown lines) for source ids (eos included) and target ids (bos first); the
    vocabularies name the tokens (a piece per id)."""
    cfg = model.config
    if (
        cfg.attention != "scaled_dot"
        or cfg.positional not in ("sinusoidal", "learned")
        or (cfg.n_kv_heads not in (None, cfg.n_heads))
        or cfg.attention_temperature != 1.0
    ):
        raise ValueError(
            "the walk-through shows the paper's model: scaled dot-product scores (temperature 1), "
            "sinusoidal or learned positions, one key/value head per query head"
        )
    model.eval()
    page = Page()
    src = torch.tensor([src_ids])  # (1, S)
    tgt = torch.tensor([tgt_ids])  # (1, T)
    pieces = [src_vocabulary[i] for i in src_ids], [tgt_vocabulary[i] for i in tgt_ids]
    _tokens(page, src, tgt, *pieces)
    x = _embedding(page, model, src)
    layer = model.encoder.layers[0]
    x = _encoder_layer(page, layer, x)
    for i, other in enumerate(model.encoder.layers[1:], 2):
        x = other(x)
        page.tensors((f"after encoder layer {i}", x))
    memory = model.encoder.norm(x)
    page.tensors(("memory", memory))
    if not torch.allclose(memory, model.encode(src), atol=1e-5):
        raise AssertionError("the walkthrough's memory differs from model.encode")
    _decoder(page, model, tgt, memory, tgt_vocabulary)
    return page.lines[1:]


def _tokens(
    page: Page, src: Tensor, tgt: Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> None:
    page.section(
        "1. Tokens and ids",
        "The source is cut into subword tokens, each a row of the vocabulary; `</s>` ends it. The "
        "decoder reads the target shifted right: `<s>` first (teacher forcing), and learns to "
        "predict each next token.",
        f"Code: {_link('SubwordTokenizer', 'src/qkv/data/tokenizer.py')}; "
        f"test: {_link('test_tokenizer.py', 'tests/data/test_tokenizer.py')}.",
    )
    page.lines += ["```", f"source tokens   {src_pieces}", f"source ids      {src[0].tolist()}"]
    page.lines += [f"target tokens   {tgt_pieces}", f"target ids      {tgt[0].tolist()}", "```"]


def _embedding(page: Page, model: Transformer, src: Tensor) -> Tensor:
    stack = model.encoder
    raw = stack.embedding.lookup(src)  # (1, S, D)
    scaled = stack.embedding(src)  # (1, S, D) * sqrt(D)
    d = raw.size(-1)
    page.section(
        "2. Embedding × √d_model, plus positions",
        f"Each id picks a row of the embedding table (D = {d}); the row is multiplied by √D = "
        f"{math.sqrt(d):.2f} (paper 3.4), and the positional encoding of its position is added "
        "(sinusoidal: sin on even, cos on odd features).",
        f"Code: {_link('TokenEmbedding', 'src/qkv/model/embedding.py')}, "
        f"{_link('SinusoidalPositionalEncoding', 'src/qkv/model/positions.py')}; tests: "
        f"{_link('test_positions.py', 'tests/model/test_positions.py')}.",
    )
    x = stack.embed(src)  # (1, S, D): dropout is off in eval mode
    page.tensors(("embedding row", raw), ("× √D", scaled), ("+ positions = x", x))
    return x


def _attention(
    page: Page,
    attn: MultiHeadedAttention,
    query: Tensor,
    keys: Tensor,
    mask: Tensor | None,
    title: str,
) -> Tensor:
    """Q, K, V per head, the scaled scores, the softmax and the heads joined; checked against the
    module's own output and weights."""
    if attn.cross:
        q, (k, v) = attn.project_query(query), attn.project_memory(keys)
    else:
        q, k, v = attn.project_self(query)  # (1, H, T, Dh) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_head)  # (1, H, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (1, H, T_q, T_k)
    heads = weights @ v  # (1, H, T_q, Dh)
    joined = heads.transpose(1, 2).reshape(query.size(0), query.size(1), -1)  # (1, T_q, D)
    out = attn.out_proj(joined)
    args = (query, keys) if attn.cross else (query,)
    want, want_weights = attn(*args, mask=mask, need_weights=True)
    if not (
        torch.allclose(out, want, atol=1e-5) and torch.allclose(weights, want_weights, atol=1e-5)
    ):
        raise AssertionError(f"{title}: the walkthrough's attention differs from the module's")
    page.tensors(
        (f"Q  ({attn.n_heads} heads)", q), ("K", k), ("V", v),
        ("Q Kᵀ / √d_head", scores), ("softmax: weights", weights),
        ("weights V", heads), ("heads joined", joined), ("× W_O", out),
    )  # fmt: skip
    return out


def _block(page: Page, block: SublayerConnection, x: Tensor, out: Tensor, name: str) -> Tensor:
    """The residual connection and the norm around a sub-layer's output `out` (post-norm)."""
    y = block.norm(x + out) if not block.norm_first else x + out
    page.tensors((f"x + {name}, normed" if not block.norm_first else f"x + {name}", y))
    return y


def _encoder_layer(page: Page, layer: EncoderLayer, x: Tensor) -> Tensor:
    page.section(
        "3. The first encoder layer: self-attention",
        "Each position asks (Q) every position (K) how much to take of it (V): scores Q Kᵀ / "
        "√d_head, a softmax over each row, the weighted sum of V, per head; the heads are "
        "concatenated and projected by W_O. Then the residual sum and the norm (Add & Norm).",
        f"Code: {_link('MultiHeadedAttention', 'src/qkv/model/attention.py')}, "
        f"{_link('SublayerConnection', 'src/qkv/model/layers.py')}; tests: "
        f"{_link('test_attention.py', 'tests/model/test_attention.py')}, "
        f"{_link('test_layers.py', 'tests/model/test_layers.py')}.",
    )
    h = layer.self_attn_block.norm(x) if layer.self_attn_block.norm_first else x
    x = _block(
        page,
        layer.self_attn_block,
        x,
        _attention(page, layer.self_attn, h, h, None, "encoder"),
        "attention",
    )
    return _feed_forward(page, layer.ff_block, layer.feed_forward, x, "4. The feed-forward network")


def _feed_forward(
    page: Page, block: SublayerConnection, ff: torch.nn.Module, x: Tensor, title: str
) -> Tensor:
    page.section(
        title,
        f"Two linear maps with a {ff.activation} between them, applied to each position alone: "
        f"D -> d_ff = {ff.w_1.out_features} -> D; then Add & Norm again.",
        f"Code: {_link('FeedForward', 'src/qkv/model/layers.py')}; "
        f"test: {_link('test_layers.py', 'tests/model/test_layers.py')}.",
    )
    h = block.norm(x) if block.norm_first else x
    inner = ff.w_1(h)
    out = ff(h)
    page.tensors(("W_1 x", inner), ("W_2 act(W_1 x)", out))
    return _block(page, block, x, out, "FFN")


def _decoder(
    page: Page, model: Transformer, tgt: Tensor, memory: Tensor, vocabulary: list[str]
) -> None:
    T = tgt.size(1)
    mask = causal_mask(T, device=tgt.device)  # (1, 1, T, T) bool, True = may attend
    page.section(
        "5. The decoder: masked self-attention",
        "The decoder embeds the target the same way; its self-attention may look only at the "
        "positions up to its own (the causal mask: 1 = may attend).",
        f"Code: {_link('causal_mask', 'src/qkv/model/masks.py')}, "
        f"{_link('DecoderLayer', 'src/qkv/model/layers.py')}; tests: "
        f"{_link('test_transformer.py', 'tests/model/test_transformer.py')}.",
    )
    page.lines += [
        "```",
        *(" ".join(str(int(v)) for v in row) for row in mask[0, 0].tolist()),
        "```",
    ]
    layer: DecoderLayer = model.decoder.layers[0]
    x = model.decoder.embed(tgt)
    page.tensors(("target embedded + positions", x))
    h = layer.self_attn_block.norm(x) if layer.self_attn_block.norm_first else x
    x = _block(
        page,
        layer.self_attn_block,
        x,
        _attention(page, layer.self_attn, h, h, mask, "decoder"),
        "self-attention",
    )
    _cross_and_logits(page, model, layer, x, tgt, memory, vocabulary)


def _cross_and_logits(
    page: Page,
    model: Transformer,
    layer: DecoderLayer,
    x: Tensor,
    tgt: Tensor,
    memory: Tensor,
    vocabulary: list[str],
) -> None:
    assert layer.cross_attn is not None and layer.cross_attn_block is not None
    page.section(
        "6. Cross-attention: the decoder reads the source",
        "Queries from the decoder, keys and values from the encoder's memory: each target "
        "position takes a weighted mix of the source positions.",
        f"Code: {_link('MultiHeadedAttention', 'src/qkv/model/attention.py')} (cross); test: "
        f"{_link('test_attention_weights.py', 'tests/model/test_attention_weights.py')}.",
    )
    h = layer.cross_attn_block.norm(x) if layer.cross_attn_block.norm_first else x
    x = _block(
        page,
        layer.cross_attn_block,
        x,
        _attention(page, layer.cross_attn, h, memory, None, "cross"),
        "cross-attention",
    )
    x = _feed_forward(page, layer.ff_block, layer.feed_forward, x, "7. The decoder's feed-forward")
    for other in model.decoder.layers[1:]:
        x = other(x, memory, causal_mask(tgt.size(1), device=tgt.device))
    hidden = model.decoder.norm(x)
    logits = model.output_projection(hidden)  # (1, T, V)
    if not torch.allclose(logits, model.decode(tgt, memory), atol=1e-4):
        raise AssertionError("the walkthrough's logits differ from model.decode")
    page.section(
        "8. Logits and the next token",
        "The last hidden state is projected on the vocabulary (the output projection shares the "
        "target embedding, paper 3.4); a softmax gives each next-token probability.",
        f"Code: {_link('Transformer', 'src/qkv/model/transformer.py')}; decoding: "
        f"{_link('decode/search.py', 'src/qkv/decode/search.py')} (`qkv translate --trace`).",
    )
    probs = logits[0, -1].softmax(-1)
    page.tensors(("logits", logits), ("softmax, last position", probs))
    top = probs.topk(3)
    best = zip(top.values.tolist(), top.indices.tolist(), strict=True)
    page.lines += [
        "```",
        *(f"next token {vocabulary[i]!r} (id {i}): p = {p:.3f}" for p, i in best),
        "```",
    ]


__all__ = ["walkthrough"]
