"""int8 dynamic quantization for CPU decoding.

Every `nn.Linear` (the attention projections, the feed-forward network, the output projection) gets
int8 weights with one scale per output row; its input is quantized on the fly, per call, from its
own range, and the matmul runs in int8 with int32 accumulation (fbgemm). Embeddings, layer norms and
the attention itself stay in float32. Weights shrink 4x, which is what a memory-bound batch-1
decoder is waiting on.

    translator = Translator.load("runs/m30k-en-de", RuntimeOptions(quantize="int8"))
    # or, from the command line: qkv translate --quantize int8
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable

import torch
from torch import nn

QUANTIZATIONS = ("int8",)


def quantize_int8(
    model: nn.Module, inplace: bool = False, only: Iterable[str] | None = None
) -> nn.Module:
    """An int8 copy of `model` for CPU inference.

    The original is left as it is, unless `inplace`: then its linear layers are swapped, which saves
    holding a float copy. Tied weights are untied: the quantized output projection no longer shares
    the embedding matrix. only: the dotted names of the submodules whose linear layers become int8
    (default: every linear layer).
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError(
            "int8 dynamic quantization runs on the CPU; load the model with device='cpu'"
        )
    if "fbgemm" in torch.backends.quantized.supported_engines:
        # x86; elsewhere torch keeps its default (qnnpack on ARM)
        torch.backends.quantized.engine = "fbgemm"
    model = (model if inplace else copy.deepcopy(model)).eval()
    # torch.ao.quantization announces its move to torchao (and away from qint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings(
            "ignore", message=".*quantized tensor creation functions.*", category=UserWarning
        )
        targets = [nn.Linear] if only is None else list(only)  # a module class, or names
        spec = dict.fromkeys(targets, per_channel_dynamic_qconfig)
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=inplace)
