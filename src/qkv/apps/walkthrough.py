"""One sentence through an encoder-decoder Transformer, step by step, as a Markdown page: every
tensor's shape and a few of its numbers, printed from the tensors the model's own modules compute
(`qkv explain`, docs/walkthrough.md).

    page = walkthrough(model, src_ids, tgt_ids, src_pieces, tgt_pieces)   # Markdown lines
    text, page = explain_sentence(translator, "4 0 5 2")   # the greedy translation read back

What is computed by hand here (scores, softmax, concatenation, each layer) is checked against what
the modules return, and the logits against `model.decode`: the page cannot show a computation the
model does not do.

Details: docs/architecture.md, "The walkthrough" (the steps, how rows are named).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..decode.options import DecodeOptions
from ..model import Transformer
from ..model.attention import MultiHeadedAttention
from ..model.layers import DecoderLayer, EncoderLayer, SublayerConnection
from ..model.masks import causal_mask
from .translator import Translator

SHOWN = 4  # numbers shown per vector
HEAD = 0  # the head shown in full


class Page:
    """Markdown lines: numbered sections of prose, and blocks of tensors."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.number = 0

    def section(self, title: str, text: str, where: str) -> None:
        self.number += 1
        self.lines += ["", f"## {self.number}. {title}", "", text, "", where, ""]

    def block(self, *lines: str) -> None:
        """Lines in the code block just written if the page ends with one, else in a new one."""
        if self.lines and self.lines[-1] == "```" and self.lines.count("```") % 2 == 0:
            self.lines.pop()
        else:
            self.lines.append("```")
        self.lines += [*lines, "```"]

    def tensors(self, *named: tuple[str, Tensor | None]) -> None:
        """Shapes and the first numbers of the first row."""
        self.block(*(_line(name, t) for name, t in named))

    def matrix(self, name: str, t: Tensor, rows: list[str], columns: list[str] | None) -> None:
        """A 2-D tensor in full, its rows labelled (and its columns, when given)."""
        width = max(map(len, rows))
        lines = [f"{name}  {tuple(t.shape)}"]
        if columns is not None:
            lines.append(" " * width + "".join(f"{c[:6]:>7}" for c in columns))
        for label, row in zip(rows, t.tolist(), strict=True):
            lines.append(f"{label:>{width}}" + "".join(f"{v:7.2f}" for v in row))
        self.block(*lines)


def _line(name: str, t: Tensor | None) -> str:
    if t is None:
        return f"{name:<26} none"
    row = t.detach().float()
    while row.dim() > 1:
        row = row[0]
    values = ", ".join(f"{v:.2f}" for v in row[:SHOWN].tolist())
    return f"{name:<26} {tuple(t.shape)}  [{values}{', ...' if row.numel() > SHOWN else ''}]"


def _link(name: str, path: str) -> str:
    return f"[`{name}`](../{path})"


def _kind(module: nn.Module) -> str:
    return type(module).__name__


@torch.no_grad()
def walkthrough(
    model: Transformer,
    src_ids: list[int],
    tgt_ids: list[int],
    src_vocabulary: list[str],
    tgt_vocabulary: list[str],
) -> list[str]:
    """The page (Markdown lines) for source ids (eos included) and target ids (bos first); the
    vocabularies name the tokens (a piece per id; the same list when the vocabulary is joint)."""
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
    _tokens(page, src, tgt, *pieces, joint=src_vocabulary == tgt_vocabulary)
    x = _embedding(page, model, src)
    for n, layer in enumerate(model.encoder.layers, 1):
        x = _encoder_layer(page, layer, x, n, pieces[0])
    memory = model.encoder.norm(x)
    page.tensors(("memory", memory))
    if not torch.allclose(memory, model.encode(src), atol=1e-5):
        raise AssertionError("the walkthrough's memory differs from model.encode")
    logits = model.decode(tgt, memory)  # (1, T, V): what each position writes names its row
    writes = [*pieces[1][1:], tgt_vocabulary[int(logits[0, -1].argmax())]]
    rows = [f"{r}→{w}" for r, w in zip(pieces[1], writes, strict=True)]
    _decoder(page, model, tgt, memory, (rows, pieces[1], pieces[0]))
    _logits(page, model, tgt, memory, logits, tgt_vocabulary)
    return page.lines[1:]


def _tokens(
    page: Page, src: Tensor, tgt: Tensor, src_pieces: list[str], tgt_pieces: list[str], joint: bool
) -> None:
    page.section(
        "Tokens and ids",
        "The source is cut into subword tokens (SentencePiece), each a row of the vocabulary; "
        "`</s>` ends it. A piece that begins with `▁` begins a word: SentencePiece writes the "
        "space before a word as `▁`, so the text comes back from the pieces exactly. "
        + (
            "The vocabulary is joint: one SentencePiece model cut both languages, so a piece has "
            "the same id on both sides and the source and target embeddings can be one table "
            "(paper 3.4). "
            if joint
            else "Source and target have a vocabulary each. "
        )
        + "The decoder reads the target shifted right: `<s>` first (teacher forcing), and learns "
        "to predict each next token.",
        f"Code: {_link('SubwordTokenizer', 'src/qkv/data/tokenizer.py')}; "
        f"test: {_link('test_tokenizer.py', 'tests/data/test_tokenizer.py')}.",
    )
    page.block(
        f"source tokens   {src_pieces}",
        f"source ids      {src[0].tolist()}",
        f"target tokens   {tgt_pieces}",
        f"target ids      {tgt[0].tolist()}",
    )


def _embedding(page: Page, model: Transformer, src: Tensor) -> Tensor:
    stack = model.encoder
    raw = stack.embedding.lookup(src)  # (1, S, D)
    scaled = stack.embedding(src)  # (1, S, D) * sqrt(D)
    d = raw.size(-1)
    shared = model.output_projection.weight is model.decoder.embedding.weight
    page.section(
        "Embedding × √d_model, plus positions",
        f"Each id picks a row of the embedding table ({_kind(stack.embedding)}, V × D = "
        f"{tuple(stack.embedding.weight.shape)}); the row is multiplied by √D = {math.sqrt(d):.2f} "
        f"(paper 3.4), and the {_kind(stack.absolute)} of its position is added"
        + (" (sin on even, cos on odd features)" if model.config.positional == "sinusoidal" else "")
        + ("; the output projection reuses this table" if shared else "")
        + ".",
        f"Code: {_link(_kind(stack.embedding), 'src/qkv/model/embedding.py')}, "
        f"{_link(_kind(stack.absolute), 'src/qkv/model/positions.py')}; tests: "
        f"{_link('test_positions.py', 'tests/model/test_positions.py')}.",
    )
    x = stack.embed(src)  # (1, S, D): dropout is off in eval mode
    page.tensors(("embedding table", stack.embedding.weight), ("embedding row", raw))
    page.tensors(("× √D", scaled), ("+ positions = x", x))
    return x


def _projections(page: Page, attn: MultiHeadedAttention) -> None:
    """The weights that make Q, K and V, and their biases."""
    weight, bias = attn.projection()  # (q_dim + 2 kv_dim, D), (q_dim + 2 kv_dim,) or None
    sizes = [attn.q_dim, attn.kv_dim, attn.kv_dim]
    parts = weight.split(sizes)
    biases = [None] * 3 if bias is None else list(bias.split(sizes))
    named = [(f"W_{n} (D × D)", w.T) for n, w in zip("QKV", parts, strict=True)]
    page.tensors(*named, *((f"b_{n}", b) for n, b in zip("QKV", biases, strict=True)))
    page.tensors(("W_O", attn.out_proj.weight.T), ("b_O", attn.out_proj.bias))


def _attention(
    page: Page,
    attn: MultiHeadedAttention,
    query: Tensor,
    keys: Tensor,
    mask: Tensor | None,
    labels: tuple[list[str], list[str]] | None,
) -> Tensor:
    """Q, K, V per head (x W + b), the scaled scores, the softmax and the heads joined; checked
    against the module's own output and weights. labels: (rows, columns) to show one head's Q, K,
    scores and weights in full, with the projections' weights and biases."""
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
        raise AssertionError("the walkthrough's attention differs from the module's")
    if labels is not None:
        _projections(page, attn)
    page.tensors((f"Q  ({attn.n_heads} heads)", q), ("K", k), ("V", v))
    if labels is not None:
        rows, columns = labels
        dims = [f"d{i}" for i in range(attn.d_head)]
        page.matrix(f"Q of head {HEAD + 1}", q[0, HEAD], rows, dims)
        page.matrix(f"K of head {HEAD + 1}", k[0, HEAD], columns, dims)
        page.matrix(f"Q Kᵀ / √{attn.d_head}, head {HEAD + 1}", scores[0, HEAD], rows, columns)
        page.matrix(f"softmax: weights, head {HEAD + 1}", weights[0, HEAD], rows, columns)
    page.tensors(("Q Kᵀ / √d_head", scores), ("softmax: weights", weights))
    page.tensors(("weights V", heads), ("heads joined", joined), ("× W_O + b_O", out))
    return out


def _block(page: Page, block: SublayerConnection, x: Tensor, out: Tensor, name: str) -> Tensor:
    """The residual connection and the norm around a sub-layer's output `out` (post-norm)."""
    y = block.norm(x + out) if not block.norm_first else x + out
    page.tensors((f"x + {name}, normed" if not block.norm_first else f"x + {name}", y))
    return y


def _self_attention(
    page: Page,
    layer: EncoderLayer | DecoderLayer,
    x: Tensor,
    mask: Tensor | None,
    labels: tuple[list[str], list[str]] | None,
) -> Tensor:
    h = layer.self_attn_block.norm(x) if layer.self_attn_block.norm_first else x
    out = _attention(page, layer.self_attn, h, h, mask, labels)
    return _block(page, layer.self_attn_block, x, out, "self-attention")


def _encoder_layer(page: Page, layer: EncoderLayer, x: Tensor, n: int, tokens: list[str]) -> Tensor:
    """Encoder layer n: the first in detail, the others as their tensors; checked against the
    layer's own forward."""
    first = n == 1
    norm = _kind(layer.self_attn_block.norm)
    page.section(
        f"Encoder layer {n} ({_kind(layer)}): self-attention",
        "Each position asks (Q) every position (K) how much to take of it (V): Q = x W_Q + b_Q, "
        "K = x W_K + b_K, V = x W_V + b_V, split into heads; scores Q Kᵀ / √d_head, a softmax "
        "over each row (each row is a query, a token that attends; each column a key), the "
        f"weighted sum of V; the heads are concatenated and projected by W_O (+ b_O). Then the "
        f"residual sum and the norm (Add & Norm: {_kind(layer.self_attn_block)} with a {norm} "
        f"of gain γ and bias β). Head {HEAD + 1}'s matrices are shown in full."
        if first
        else f"The same steps with this layer's own weights, on the output of layer {n - 1}.",
        f"Code: {_link(_kind(layer.self_attn), 'src/qkv/model/attention.py')}, "
        f"{_link(_kind(layer.self_attn_block), 'src/qkv/model/layers.py')}; tests: "
        f"{_link('test_attention.py', 'tests/model/test_attention.py')}, "
        f"{_link('test_layers.py', 'tests/model/test_layers.py')}.",
    )
    y = _self_attention(page, layer, x, None, (tokens, tokens) if first else None)
    if first:
        block = layer.self_attn_block.norm
        page.tensors((f"{norm} γ", block.weight), (f"{norm} β", getattr(block, "bias", None)))
    y = _feed_forward(page, layer.ff_block, layer.feed_forward, y, f"Encoder layer {n}", first)
    if not torch.allclose(y, layer(x), atol=1e-5):
        raise AssertionError(f"the walkthrough's encoder layer {n} differs from the module's")
    return y


def _feed_forward(
    page: Page, block: SublayerConnection, ff: nn.Module, x: Tensor, where: str, detail: bool
) -> Tensor:
    page.section(
        f"{where}: the feed-forward network",
        f"{_kind(ff)}: two linear maps with a {ff.activation} between them, applied to each "
        f"position alone: D -> d_ff = {ff.w_1.out_features} -> D, W_2 act(x W_1 + b_1) + b_2; "
        "then Add & Norm again.",
        f"Code: {_link(_kind(ff), 'src/qkv/model/layers.py')}; "
        f"test: {_link('test_layers.py', 'tests/model/test_layers.py')}.",
    )
    if detail:
        page.tensors(("W_1", ff.w_1.weight.T), ("b_1", ff.w_1.bias))
        page.tensors(("W_2", ff.w_2.weight.T), ("b_2", ff.w_2.bias))
    h = block.norm(x) if block.norm_first else x
    inner = ff.w_1(h)
    out = ff(h)
    page.tensors(("x W_1 + b_1", inner), ("W_2 act(.) + b_2", out))
    return _block(page, block, x, out, "FFN")


def _decoder(
    page: Page,
    model: Transformer,
    tgt: Tensor,
    memory: Tensor,
    labels: tuple[list[str], list[str], list[str]],
) -> None:
    """Every decoder layer, the first in detail; labels: the decoder's rows (`read→writes`), the
    tokens it reads (its keys) and the source tokens."""
    T = tgt.size(1)
    mask = causal_mask(T, device=tgt.device)  # (1, 1, T, T) bool, True = may attend
    page.section(
        "The decoder: masked self-attention",
        "The decoder embeds the target the same way; its self-attention may look only at the "
        "positions up to its own (the causal mask: 1 = may attend). A decoder row is named "
        "`read→writes`: the token its position reads and the one it predicts.",
        f"Code: {_link('causal_mask', 'src/qkv/model/masks.py')}, "
        f"{_link(_kind(model.decoder.layers[0]), 'src/qkv/model/layers.py')}; tests: "
        f"{_link('test_transformer.py', 'tests/model/test_transformer.py')}.",
    )
    page.block(*(" ".join(str(int(v)) for v in row) for row in mask[0, 0].tolist()))
    x = model.decoder.embed(tgt)
    page.tensors(("target embedded + positions", x))
    rows, reads, source = labels
    for n, layer in enumerate(model.decoder.layers, 1):
        first = n == 1
        if not first:
            page.section(
                f"Decoder layer {n} ({_kind(layer)})",
                f"The same steps with this layer's own weights, on the output of layer {n - 1}: "
                "masked self-attention, cross-attention over the same memory, the FFN.",
                f"Code: {_link(_kind(layer), 'src/qkv/model/layers.py')}.",
            )
        y = _self_attention(page, layer, x, mask, (rows, reads) if first else None)
        y = _cross(page, layer, y, memory, (rows, source) if first else None, n)
        y = _feed_forward(page, layer.ff_block, layer.feed_forward, y, f"Decoder layer {n}", False)
        if not torch.allclose(y, layer(x, memory, mask), atol=1e-5):
            raise AssertionError(f"the walkthrough's decoder layer {n} differs from the module's")
        x = y


def _cross(
    page: Page,
    layer: DecoderLayer,
    x: Tensor,
    memory: Tensor,
    labels: tuple[list[str], list[str]] | None,
    n: int,
) -> Tensor:
    assert layer.cross_attn is not None and layer.cross_attn_block is not None
    if labels is not None:
        page.section(
            f"Decoder layer {n}: cross-attention, the decoder reads the source",
            "Queries from the decoder, keys and values from the encoder's memory (the same for "
            "every decoder layer): each target position takes a weighted mix of the source "
            "positions.",
            f"Code: {_link(_kind(layer.cross_attn), 'src/qkv/model/attention.py')} (cross); test: "
            f"{_link('test_attention_weights.py', 'tests/model/test_attention_weights.py')}.",
        )
    h = layer.cross_attn_block.norm(x) if layer.cross_attn_block.norm_first else x
    out = _attention(page, layer.cross_attn, h, memory, None, labels)
    return _block(page, layer.cross_attn_block, x, out, "cross-attention")


def _logits(
    page: Page,
    model: Transformer,
    tgt: Tensor,
    memory: Tensor,
    want: Tensor,
    vocabulary: list[str],
) -> None:
    x = model.decoder.embed(tgt)
    for layer in model.decoder.layers:
        x = layer(x, memory, causal_mask(tgt.size(1), device=tgt.device))
    logits = model.output_projection(model.decoder.norm(x))  # (1, T, V)
    if not torch.allclose(logits, want, atol=1e-4):
        raise AssertionError("the walkthrough's logits differ from model.decode")
    tied = model.output_projection.weight is model.decoder.embedding.weight
    page.section(
        "Logits and the next token",
        "The last hidden state is projected on the vocabulary ("
        + (
            "x Eᵀ: the output projection is the target embedding table E, transposed, paper 3.4"
            if tied
            else "by an output projection of its own"
        )
        + "); a softmax gives each next-token probability.",
        f"Code: {_link(_kind(model), 'src/qkv/model/transformer.py')}; decoding: "
        f"{_link('decode/search.py', 'src/qkv/decode/search.py')} (`qkv translate --trace`).",
    )
    probs = logits[0, -1].softmax(-1)
    page.tensors(("logits", logits), ("softmax, last position", probs))
    top = probs.topk(3)
    best = zip(top.values.tolist(), top.indices.tolist(), strict=True)
    page.block(*(f"next token {vocabulary[i]!r} (id {i}): p = {p:.3f}" for p, i in best))


def explain_sentence(translator: Translator, sentence: str) -> tuple[str, list[str]]:
    """The translator's greedy translation of `sentence` and the page of the model reading it
    (the translation is the target the decoder reads, teacher-forced)."""
    [result] = translator.translate_detailed([sentence], DecodeOptions(beam=1))
    tok = translator.tokenizer
    [ids] = translator.encode([sentence])
    lines = walkthrough(
        translator.model,  # type: ignore[arg-type]
        [*ids, tok.eos_id],
        [tok.bos_id, *result.tokens],
        tok.src_vocabulary(),
        tok.tgt_vocabulary(),
    )
    return result.text, lines


__all__ = ["explain_sentence", "walkthrough"]
