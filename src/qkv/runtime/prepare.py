"""The one function that prepares a model for decoding.

Every speed path is a swap applied here, from outside the model, and each has an equivalence test
against the plain model (tests/runtime/).
"""

from __future__ import annotations

import torch
from torch import nn

from .captured import INT8_KV_DTYPE, capture_decoder, int8_linears
from .decoding_attention import use_decoding_attention
from .packed import pack_linear_weights, packing_available
from .precision import resolve_precision
from .quantize import quantize_int8_measured
from .runtime_options import RuntimeOptions

FP32 = RuntimeOptions(precision="fp32")  # the default: float32 on the CPU, packed where torch packs


def prepare_for_decoding(
    model: nn.Module, runtime: RuntimeOptions = FP32, plain_rows: int = 0
) -> nn.Module:
    """The model as decoding runs it, changed in place and put in eval mode, as `runtime` says
    (its device, precision, quantize, pack and capture; the rest is the translator's).

    Always: the decoding attention kernels (`runtime.decoding_attention`). Then quantize="int8"
    swaps the linear layers for int8 ones (`runtime.quantize`); otherwise pack=True (or None on a
    CPU where torch packs weights of the model's dtype) packs the linear weights for oneDNN
    (`runtime.packed`); pack=False leaves nn.Linear. The prepared model still gives attention
    weights on request (an `AttentionWeights` passed to it); with float32 weights, packed or not,
    they equal the plain model's.

    int8's products run on the int8 library (fbgemm or oneDNN) measured faster for each group of
    layers on this CPU (`runtime.quantize.quantize_int8_measured`).

    precision ("auto", "fp32", "bf16"; `runtime.precision`): bf16 casts every weight and buffer
    once, embeddings and output projection included, before packing; the search takes its
    log-probabilities in fp32 from the bf16 logits. int8 keeps its own kernels: with int8, "auto"
    means fp32 and "bf16" is refused.

    capture: the decoder's cached one-token steps run compiled (`runtime.captured`), the weights
    frozen into the program (packing is left to the compiler); int8 there is `int8_linears`, with
    keys and values cached in float16 (`runtime.captured.INT8_KV_DTYPE`).
    plain_rows: packed layers multiply inputs of at most that many rows by the weights as stored,
    kept beside the packed ones (`runtime.choice` sets it where one row runs faster so).
    """
    if not isinstance(runtime, RuntimeOptions):
        raise TypeError(f"runtime must be a RuntimeOptions, got {type(runtime).__name__}")
    device, precision, quantize = runtime.device, runtime.precision, runtime.quantize
    pack, capture = runtime.pack, runtime.capture
    model = use_decoding_attention(model.eval())
    if quantize is None and resolve_precision(precision, device) == "bf16":
        model = model.to(torch.bfloat16)
    if capture:
        if quantize is None:
            return capture_decoder(model)
        return capture_decoder(int8_linears(model), kv_dtype=INT8_KV_DTYPE)
    if quantize is not None:
        return quantize_int8_measured(model)  # in place: the float model is not kept
    dtype = next(model.parameters()).dtype
    on_cpu = torch.device(device).type == "cpu"
    if pack or (pack is None and on_cpu and packing_available(dtype)):
        return pack_linear_weights(model, plain_rows)
    return model


__all__ = ["FP32", "prepare_for_decoding"]
