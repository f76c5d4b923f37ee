"""Linear layers with weights packed once for the CPU's matmul kernels: faster float32 decoding.

`nn.Linear` multiplies by W as it is stored, row-major, and the matmul library re-blocks it into
cache-sized panels on every call. For training that cost is hidden by large batches; a decoder step
is a small (rows x d_model) input against every weight matrix, so it is paid hundreds of times per
token. `PackedLinear` reorders W once, at load time, into oneDNN's blocked layout
(`torch.ops.mkldnn._reorder_linear_weight`, the op `torch.compile` uses for frozen CPU models) and
multiplies with oneDNN. Same float32 arithmetic, in another order: outputs agree with `nn.Linear` to
float rounding (tests: 1e-5).

Inference only (no backward); the speed-up over `nn.Linear` in greedy and beam decoding is measured
in docs/benchmarks.md. `Translator.load` packs where it measures packing faster (`runtime.choice`).

    translator = Translator.load("runs/m30k-en-de", RuntimeOptions(pack=True))  # packed, always
    model = pack_linear_weights(model)               # any model, e.g. for `decode.greedy`
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .swap import replace_modules


@cache
def packing_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this torch build and this CPU pack linear weights of `dtype` for oneDNN.

    x86 builds have the ops; bfloat16 packing also needs CPU instructions (AVX-512 BW/VL/DQ or
    AVX-NE-CONVERT) that oneDNN checks when asked, so a tiny weight is packed once to find out.
    """
    if not (
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    ):
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=dtype), 1)
    except RuntimeError:
        return False
    return True


class PackedLinear(nn.Module):
    """y = x W^T + b with W held in oneDNN's blocked layout (CPU, float32 or bfloat16 as stored,
    inference only).

    x (..., in_features) -> (..., out_features).
    """

    def __init__(self, linear: nn.Linear, batch_hint: int = 32, plain_rows: int = 0) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        # oneDNN picks the blocking for about `batch_hint` input rows; any number of rows works
        self.packed = torch.ops.mkldnn._reorder_linear_weight(
            linear.weight.detach(), batch_hint
        )
        self.bias = None if linear.bias is None else linear.bias.detach()
        # inputs of at most `plain_rows` rows multiply the weight as stored (where that is faster)
        self.plain_rows = plain_rows
        self.weight = linear.weight.detach() if plain_rows else None

    def forward(self, x: Tensor) -> Tensor:
        if self.weight is not None and x.numel() <= self.plain_rows * self.in_features:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, plain_rows={self.plain_rows}"
        )


def pack_linear_weights(model: nn.Module, plain_rows: int = 0) -> nn.Module:
    """Replace every `nn.Linear` of `model` (in place) by a `PackedLinear`; return it in eval mode.

    The float weights of the replaced layers are released (a tied output projection gets its own
    packed copy; the embedding it was tied to stays), unless `plain_rows`: then each layer keeps
    them too (twice the weight memory) and multiplies inputs of at most that many rows by them.
    """
    dtypes = (torch.float32, torch.bfloat16)
    if any(p.device.type != "cpu" or p.dtype not in dtypes for p in model.parameters()):
        raise ValueError("packed weights are for float32 or bfloat16 models on the CPU")
    dtype = next(model.parameters()).dtype
    if not packing_available(dtype):
        raise RuntimeError(
            f"this torch build or CPU cannot pack {dtype} linear weights for oneDNN; "
            "decode unpacked"
        )
    def packed(layer: nn.Module) -> nn.Module:  # an empty layer (d_ff 0) has nothing to pack
        return PackedLinear(layer, plain_rows=plain_rows) if layer.weight.numel() > 0 else layer

    return replace_modules(model, nn.Linear, packed).eval()


__all__ = ["PackedLinear", "pack_linear_weights", "packing_available"]
