"""How a model is prepared to train fast on the CPU: two changes applied from outside the model,
each computing what the plain model computes (docs/benchmarks.md, "bf16 against fp32").

* `MaskDropout` replaces `nn.Dropout` (`runtime.swap.replace_modules`): the same function (zero
  each element with probability p, scale the rest by 1 / (1 - p)), with the mask cut from random
  64-bit integers, four 15-bit uniform draws from each (`keep_mask`): a quarter of the serial
  generator's draws that torch's `bernoulli_` (one per element) makes.
* In bf16 on the CPU, attention takes the readable path (two bf16 matmuls and an fp32 softmax,
  `scaled_dot_product_attention`; the module's own `fused` switch set to False) instead of the
  fused `F.scaled_dot_product_attention`, whose bf16 backward is slower at translation lengths;
  fp32 keeps the fused kernel.

    notes = prepare_for_training(model, precision="bf16", device=torch.device("cpu"))
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model.attention import MultiHeadedAttention
from .swap import replace_modules

LANE_BITS = 15  # a 64-bit draw of `random_` has 63 random bits: four lanes of 15
LANES_15 = 0x7FFF7FFF7FFF7FFF  # the four lanes' low 15 bits


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """A bool tensor of `shape`, each element True independently with probability 1 - p (p
    rounded to a multiple of 2^-15): the int16 lanes of random 64-bit integers, masked to 15
    uniform bits each, compared with p * 2^15."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()  # [0, 2^63)
    lanes = (words & LANES_15).view(torch.int16)[:n]  # (n,) uniform over [0, 2^15)
    return (lanes >= round(p * 2**LANE_BITS)).view(shape)


class MaskDropout(nn.Dropout):
    """nn.Dropout with the mask from `keep_mask` (four draws per random 64-bit integer), applied
    in x's dtype: the same distribution (to 2^-15) and scaling as `F.dropout`, faster on the
    CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = keep_mask(x.shape, self.p, x.device)  # (...,) bool, P(keep) = 1 - p
        return x * (keep.to(x.dtype) * (1.0 / (1.0 - self.p)))


def prepare_for_training(model: nn.Module, precision: str, device: torch.device) -> list[str]:
    """Apply the CPU training swaps to `model` in place (on other devices nothing); returns one
    line per swap applied, for the log."""
    if device.type != "cpu":
        return []
    notes = []
    swapped = sum(type(m) is nn.Dropout for m in model.modules())
    replace_modules(model, nn.Dropout, lambda d: MaskDropout(d.p))
    if swapped:
        notes.append(f"{swapped} dropout modules cut their masks from random bits (MaskDropout)")
    if precision == "bf16":
        readable = 0
        for module in model.modules():
            if isinstance(module, MultiHeadedAttention) and module.fused:
                module.fused = False
                readable += 1
        if readable:
            notes.append(f"{readable} attention modules take the readable bf16 path")
    return notes


__all__ = ["MaskDropout", "keep_mask", "prepare_for_training"]
