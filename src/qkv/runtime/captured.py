"""A captured decoding step: the decoder's one-new-token step compiled into one C++ program.

At batch 1 a decoding step is a few hundred small operations, each paying more in Python and
dispatch than in arithmetic. `CapturedDecoder` replaces a model's `Decoder` (`capture_decoder`) and
runs that step through `torch.compile` (TorchInductor, C++ wrapper, frozen weights, symbolic
shapes: a program per family of shapes, `own_step`), writing each layer's new key and value into
the model's `DecoderCache` in place; attention reads the positions held, rounded up to `READ_BLOCK`.
The rest (a prefix's first call, attention weights, training) runs the readable `Decoder` it wraps.

int8 (`int8_linears`): the step's linear layers are `Int8Linear` (weights per output row, inputs per
row at run time, as CTranslate2 does), each product on the kernel measured faster and checked right
on this CPU (`runtime.int8_choice`); its caches hold float16 (`INT8_KV_DTYPE`); the encoder and the
memory projections (many rows, once per source) are torch's dynamic int8 (`runtime.quantize`).
Attention runs qkv's C++ kernel (`runtime.kernels`) where it builds. Compiling costs seconds once
per process (cached in `TORCHINDUCTOR_CACHE_DIR`); gains: docs/benchmarks.md, "A captured step".
"""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed
import torch.nn.functional as F
from torch import Tensor, nn

from ..model.attention import AttentionWeights, DotProductScore, MultiHeadedAttention
from ..model.cache import DecoderCache
from ..model.layers import SublayerConnection
from ..model.transformer import Decoder
from .decoding_attention import grouped_attention
from .int8_choice import kernel_rows_faster, onednn_rows_faster, weight_levels
from .kernels import decoding_attention, int8_linear, pack_int8_weight
from .quantize import many_row_layers, quantize_int8_measured
from .swap import rebuilt_as, replace_modules

CAPTURE_OPTIONS = {"cpp_wrapper": True}  # torch.compile's inductor options
DEQUANTIZE = torch.ops.quantized_decomposed
# graphs a process may compile for one step: one per family of shapes (one row or more, beams
# sharing a memory row or not, ...); past it the step runs uncompiled
RECOMPILE_LIMIT = 32
# self-attention reads the held positions rounded up to a multiple of this (at most the buffer's
# size less one): never 0 or 1, lengths torch.compile would specialise on (a second program)
READ_BLOCK = 8
# the keys and values an int8 step stores: float16 rounds each to 2^-11 of itself, finer than
# int8's quantization of the step's inputs (1/254 of a row's largest), and halves the bytes
# that every step reads from memory (docs/benchmarks.md, "A captured decoding step")
INT8_KV_DTYPE = torch.float16
# the positional encodings the step adds as one row, `absolute(zeros, length)`: those that add a
# vector to the embedding. Any other is refused until the step computes it.
CAPTURABLE_POSITIONAL = ("sinusoidal", "learned", "none")


def capture_refusal(model: nn.Module) -> str | None:
    """Why `model` cannot decode through a captured step, or None when it can."""
    decoder = getattr(model, "decoder", None)
    if not isinstance(decoder, Decoder) or getattr(model, "encoder", None) is None:
        return "a captured step needs an encoder-decoder Transformer"
    if decoder.cfg.positional not in CAPTURABLE_POSITIONAL:
        return (
            f"positional={decoder.cfg.positional!r}: the captured step adds positions to the"
            f" embedding only ({', '.join(CAPTURABLE_POSITIONAL)})"
        )
    for layer in decoder.layers:
        for attention in (layer.self_attn, layer.cross_attn):
            if attention is None or not isinstance(attention.score, DotProductScore):
                return f"attention score {decoder.cfg.attention!r} is not a dot product"
    if any(p.device.type != "cpu" for p in model.parameters()):
        return "the captured step runs on the CPU"
    if not any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c):
        return "TorchInductor needs a C++ compiler (g++ or clang++, or $CXX): none found"
    return None


class Int8Linear(nn.Module):
    """y = x W^T + b in int8: W quantized per output row, x per row when called.

    x (..., K) -> (..., N). W ≈ qweight * scale[:, None], x ≈ xq * sx; y = (xq @ qweightᵀ) sx scale.
    W takes 8 bits, or 7 where this CPU's int8 products saturate at 8 (`weight_levels`: no VNNI).

    The integer product runs in one of three kernels, with the same sums (the same outputs). On a
    CPU with AVX512-VNNI, `use_kernel()` packs the weight for qkv's own `int8_linear`
    (`qkv.runtime.kernels`), which streams it once for up to four rows at a time
    (docs/benchmarks.md, "qkv's int8 kernel"). Elsewhere one row, and every row where
    `onednn_rows` is off, runs `torch._int_mm`; several rows in the captured step with
    `onednn_rows` on, oneDNN's product of unsigned x (xq + 128, zero point 128) by the weight
    prepacked once (docs/benchmarks.md, "Frozen weights, and oneDNN's product for several rows").
    That product is written as dequantize -> linear, the pattern TorchInductor's freezing passes
    turn into `onednn.qlinear_pointwise`; `int8_linears` measures whether it is faster on this CPU.
    """

    onednn_rows = False

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp_min(1e-12) / weight_levels()  # (N,): 127 or 63
        self.register_buffer("qweight", torch.round(w / scale[:, None]).to(torch.int8))  # (N, K)
        self.register_buffer("scale", scale)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.register_buffer("bias", bias)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("unit", torch.ones(self.out_features))  # the pattern's weight scales
        self.register_buffer("zero", torch.zeros(self.out_features, dtype=torch.long))
        # `use_kernel`'s layout of qweight (which it then drops), and its row sums
        self.register_buffer("packed", None)
        self.register_buffer("row_sums", None)

    def use_kernel(self) -> None:
        """Multiply by `kernels.int8_linear` from now on, the weight held in its packed layout
        only (not twice); a RuntimeError where the kernel does not run."""
        if int8_linear() is None:
            raise RuntimeError("qkv's int8 kernel is not built here, or this CPU lacks AVX512-VNNI")
        self.packed, self.row_sums = pack_int8_weight(self.qweight)
        self.qweight = None

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, self.in_features).float()  # (M, K)
        if self.packed is not None:
            y = torch.ops.qkv.int8_linear(rows, self.packed, self.row_sums, self.scale, self.bias)
            return y.to(x.dtype).view(*x.shape[:-1], self.out_features)
        sx = rows.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127  # (M, 1)
        if self.onednn_rows and rows.size(0) > 1 and torch.compiler.is_compiling():
            unsigned = (torch.round(rows / sx) + 128).to(torch.uint8)
            xd = DEQUANTIZE.dequantize_per_tensor.default(unsigned, 1.0, 128, 0, 255, torch.uint8)
            wd = DEQUANTIZE.dequantize_per_channel.default(
                self.qweight, self.unit, self.zero, 0, -128, 127, torch.int8
            )
            y = F.linear(xd, wd) * (sx * self.scale)  # whole numbers (M, N), then scaled
        else:
            xq = torch.round(rows / sx).to(torch.int8)
            y = torch._int_mm(xq, self.qweight.t()) * (sx * self.scale)  # int32 (M, N) -> float
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)


def int8_linears(model: nn.Module) -> nn.Module:
    """Every `nn.Linear` of `model` made int8 (in place), each of the kind that runs it faster.
    Where qkv's int8 kernel runs (`kernels.int8_linear`: AVX512-VNNI) and multiplies the step's
    one-row products faster than `torch._int_mm` (`kernel_rows_faster`, measured here), the
    decoder's one-token step and the output projection are `Int8Linear` on that kernel;
    elsewhere the step's are `Int8Linear` on torch's products (the compiled program fuses their
    quantization of x) and the output projection is torch's dynamic int8. The encoder and the
    cross-attention's memory projections, many rows at once, are torch's dynamic int8 (1.3-2.5x
    faster called eagerly, docs/benchmarks.md), each group on the library measured faster at its
    rows (`runtime.quantize.quantize_int8_measured`)."""
    linears = {name: m for name, m in model.named_modules() if type(m) is nn.Linear}
    many_rows = many_row_layers(linears)
    output = [n for n in linears if n.endswith("output_projection")]
    # the step's layers, built once: measured here, then put in the model
    measured = {id(m): Int8Linear(m) for n, m in linears.items() if n not in many_rows + output}
    kernel = (
        int8_linear() is not None
        and all(m.in_features % 16 == 0 for m in linears.values())
        and kernel_rows_faster(list(measured.values()))
    )
    eager = many_rows + ([] if kernel else output)
    if eager:
        quantize_int8_measured(model, only=eager)
    replace_modules(model, nn.Linear, lambda m: measured.get(id(m)) or Int8Linear(m))
    step = [m for m in model.modules() if isinstance(m, Int8Linear)]
    faster = not kernel and onednn_rows_faster(step)
    for m in step:
        m.onednn_rows = faster
        if kernel:
            m.use_kernel()
    return model


class CapturedDecoder(Decoder):
    """A `Decoder` whose cached one-token steps run compiled (see the module's docstring); made by
    `capture_decoder`, it holds the same modules and weights. (R, 1) ids -> (R, 1, D) hidden."""

    _step: Any  # the compiled `_one_token`
    kv_dtype: torch.dtype | None = None  # its caches' keys and values (None: the model's dtype)
    attention_kernel = False  # attention by `qkv.runtime.kernels.decoding_attention`

    def forward(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        weights: AttentionWeights | None = None,
    ) -> tuple[Tensor, AttentionWeights | None]:
        if (
            cache is None
            or memory is None
            or weights is not None
            or self.training
            or tgt_ids.size(1) != 1
            or torch.is_grad_enabled()
        ):
            if cache is not None:  # the readable decoder reads them in its own dtype
                cache.cast(next(self.parameters()).dtype)
            return super().forward(tgt_ids, memory, memory_mask, cache, weights)
        R, dtype, kv = tgt_ids.size(0), memory.dtype, self.kv_dtype or memory.dtype
        cache.cast(kv)  # those a prefix (the readable decoder) left
        H_kv, Dh = self.layers[0].self_attn.n_kv_heads, self.cfg.d_head
        new = memory.new_empty(R, H_kv, 1, Dh, dtype=kv)
        keys, values, memory_keys, memory_values = [], [], [], []
        for i, layer in enumerate(self.layers):
            own, cross = cache.layer(i)
            assert cross is not None and layer.cross_attn is not None
            if cross.empty:  # once per source, as the readable decoder does
                cross.set_static(*(t.to(kv) for t in layer.cross_attn.project_memory(memory)))
            # (R, H_kv, capacity, Dh), room for this step's position and a spare one: the
            # positions read never fill a whole buffer (read whole, it is contiguous: a second
            # program)
            k, v = own.reserve(new, new, spare=1)
            keys.append(k)
            values.append(v)
            memory_keys.append(cross.keys)  # (B_m, H_kv, S, Dh)
            memory_values.append(cross.values)
        length = cache.length
        B_m, S = memory_keys[0].size(0), memory_keys[0].size(2)
        if memory_mask is None:
            memory_mask = torch.ones(B_m, 1, 1, S, dtype=torch.bool)
        zeros = torch.zeros(1, 1, self.cfg.d_model, dtype=dtype)
        positions = zeros if self.absolute is None else self.absolute(zeros, length)  # (1, 1, D)
        read = min(keys[0].size(2) - 1, -(-(length + 1) // READ_BLOCK) * READ_BLOCK)
        position = torch.tensor([length])
        ids = tgt_ids.clone(memory_format=torch.contiguous_format)  # a column's stride: a new graph
        hidden = self._step(
            ids,
            positions,
            position,
            read,
            keys,
            values,
            memory_keys,
            memory_values,
            memory_mask,
        )
        for own in cache.self_attn:
            own.advance(1)
        return hidden, None

    def _one_token(
        self,
        ids: Tensor,
        positions: Tensor,
        position: Tensor,
        read: int,
        keys: list[Tensor],
        values: list[Tensor],
        memory_keys: list[Tensor],
        memory_values: list[Tensor],
        memory_mask: Tensor,
    ) -> Tensor:
        """The step `torch.compile` captures: the readable decoder's arithmetic for one new token.

        ids (R, 1); positions (1, 1, D) the positional row added (zeros without one); position (1,)
        where the new key and value go; read: the positions self-attention reads (those held after
        this step, and a masked tail); keys/values per layer (R, H_kv, capacity, Dh), written in
        place; memory_keys/values per layer (B_m, H_kv, S, Dh); memory_mask (B_m | 1, 1, 1, S)
        -> hidden (R, 1, D).
        """
        x = self.dropout(self.embedding(ids) + positions)  # (R, 1, D)
        held = (torch.arange(read) <= position)[None, None, None, :]  # (1, 1, 1, read)
        for i, layer in enumerate(self.layers):
            x = _residual(
                layer.self_attn_block,
                x,
                lambda h, a=layer.self_attn, k=keys[i], v=values[i]: _self_attention(
                    a, h, k, v, position, held, self.attention_kernel
                ),
            )
            x = _residual(
                layer.cross_attn_block,
                x,
                lambda h, a=layer.cross_attn, k=memory_keys[i], v=memory_values[i]: _attend(
                    a, a.project_query(h), k, v, memory_mask, self.attention_kernel
                ),
            )
            x = _residual(layer.ff_block, x, layer.feed_forward)
        return self.norm(x)


def _residual(block: SublayerConnection | None, x: Tensor, sublayer: Any) -> Tensor:
    assert block is not None
    return block(x, sublayer)


def _self_attention(
    attention: MultiHeadedAttention,
    h: Tensor,
    keys: Tensor,
    values: Tensor,
    position: Tensor,
    held: Tensor,
    kernel: bool,
) -> Tensor:
    """h (R, 1, D): its key and value written at `position` of the buffers, then attention over
    their first positions, those `held` (1, 1, 1, read) -> (R, 1, D)."""
    q, k, v = attention.project_self(h)  # (R, H, 1, Dh), (R, H_kv, 1, Dh)
    keys.index_copy_(2, position, k.to(keys.dtype))
    values.index_copy_(2, position, v.to(values.dtype))
    read = held.size(-1)
    k, v = keys.narrow(2, 0, read), values.narrow(2, 0, read)
    return _attend(attention, q, k, v, held, kernel)


def _attend(
    attention: MultiHeadedAttention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: bool
) -> Tensor:
    """q (R, H, 1, Dh) over k, v (B_m, H_kv, L, Dh), R = g B_m: the g query rows of a memory row
    (beam search's hypotheses of a sentence; g = 1 for self-attention) stacked -> (R, 1, D).
    Equation 1 as the readable model writes it (`grouped_attention`): TorchInductor fuses it into
    loops over the rows, which for one query a row outrun `F.scaled_dot_product_attention`'s tiles
    for many (steps of 32 sentences 1.1-1.3x, docs/benchmarks.md). With `kernel`, the C++ kernel
    `qkv::decoding_attention` computes the same, reading the cache in its dtype."""
    R, H, _, Dh = q.shape
    B_m = k.size(0)
    q = q.reshape(B_m, R // B_m, H, Dh).transpose(1, 2)  # (B_m, H, g, Dh)
    scale = attention.score.scale / attention.temperature
    if kernel:  # a key/value head's query heads stacked, as `grouped_attention` stacks them
        out = torch.ops.qkv.decoding_attention(q.reshape(B_m, k.size(1), -1, Dh), k, v, mask, scale)
        out = out.view(B_m, H, -1, Dh)
    else:
        k, v = k.to(q.dtype), v.to(q.dtype)  # as read: a narrower cache (`kv_dtype`) cast up
        out = grouped_attention(q, k, v, mask, None, scale)  # (B_m, H, g, Dh)
    return attention.out_proj(out.transpose(1, 2).reshape(R, 1, H * Dh))


def _attention_kernel_serves(model: nn.Module, kv_dtype: torch.dtype | None) -> bool:
    """Whether the C++ decoding-attention kernel serves a step of `model` (float32 queries over a
    float32 or float16 cache) and is built (`kernels.decoding_attention`)."""
    dtype = next(model.parameters()).dtype
    if dtype != torch.float32 or (kv_dtype or dtype) not in (torch.float32, torch.float16):
        return False
    return decoding_attention() is not None


def own_step(decoder: CapturedDecoder) -> Callable[..., Tensor]:
    """`decoder._one_token` on a code object of its own. Dynamo keeps its compiled programs with
    the code they compile, so every captured decoder has programs of its own, with its own
    weights frozen in; no guard has to tell one decoder's modules from another's."""
    f = CapturedDecoder._one_token
    code = f.__code__.replace()  # an equal copy
    own = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    return types.MethodType(own, decoder)


def guards_on_the_arguments(entries: list[Any]) -> list[bool]:
    """The guards a captured step keeps at every call (`guard_filter_fn` of `torch.compile`): those
    on its arguments (rows, cache sizes, the buffers). Those on the decoder's modules and on the
    functions it calls go: once captured, a decoder's modules do not change (its weights are the
    program's constants: `own_step`), and checking them (about a thousand guards) takes a share of a
    one-row step worth saving (docs/benchmarks.md, "What a captured step checks at every call")."""
    modules = torch.compiler.skip_guard_on_all_nn_modules_unsafe(entries)
    functions = torch.compiler.skip_guard_on_globals_unsafe(entries)
    return [a and b for a, b in zip(modules, functions, strict=True)]


def capture_decoder(model: nn.Module, kv_dtype: torch.dtype | None = None) -> nn.Module:
    """Swap `model.decoder` (in place) for a `CapturedDecoder` of the same modules; returns the
    model. kv_dtype: the dtype its steps store keys and values in (None: the model's; int8
    decoding passes `INT8_KV_DTYPE`). A model that cannot (`capture_refusal`) raises a ValueError
    saying why."""
    refusal = capture_refusal(model)
    if refusal is not None:
        raise ValueError(f"cannot capture the decoding step: {refusal}")
    decoder = rebuilt_as(model.decoder, CapturedDecoder)
    decoder.kv_dtype = kv_dtype
    decoder.attention_kernel = _attention_kernel_serves(model, kv_dtype)
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)  # process-wide
    # process-wide too: dynamo reads it as it traces (an option of torch.compile reaches only
    # TorchInductor, and the weights stay the program's inputs); a graph compiled without
    # gradients then holds its module's weights as constants
    torch._inductor.config.freezing = True
    # and the modules' float settings (norms' eps, dropout's p, attention's scale) constants of
    # the program, not symbols guarded one by one at every call
    dynamo.specialize_float = True
    options = {**CAPTURE_OPTIONS, "guard_filter_fn": guards_on_the_arguments}
    decoder._step = torch.compile(own_step(decoder), dynamic=True, options=options)
    model.decoder = decoder
    return model


__all__ = [
    "INT8_KV_DTYPE",
    "CapturedDecoder",
    "Int8Linear",
    "capture_decoder",
    "capture_refusal",
    "guards_on_the_arguments",
    "int8_linears",
    "own_step",
]
