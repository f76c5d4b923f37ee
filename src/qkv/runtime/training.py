"""How a model is prepared to train fast on the CPU: two changes applied from outside the model,
each computing what the plain model computes (docs/benchmarks.md, "bf16 against fp32").

* `MaskDropout` replaces `nn.Dropout` (`runtime.swap.replace_modules`): the same function (zero
  each element with probability p, scale the rest by 1 / (1 - p)), with the mask drawn as
  `rand >= p` in the input's dtype. torch's CPU dropout draws it with `bernoulli_`, which takes
  twice as long forward + backward; with the paper's residual dropout after every sub-layer that is
  ~10% of a small model's step.
* In bf16 on the CPU, attention takes the readable path (two bf16 matmuls and an fp32 softmax,
  `scaled_dot_product_attention`; the module's own `fused` switch set to False) instead of the
  fused `F.scaled_dot_product_attention`: at translation lengths (tens of tokens) the fused
  kernel's bf16 backward is ~5x slower than the readable path's; in fp32 the two are even, so fp32
  keeps the fused kernel.

    notes = prepare_for_training(model, precision="bf16", device=torch.device("cpu"))
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model.attention import MultiHeadedAttention
from .swap import replace_modules


class MaskDropout(nn.Dropout):
    """nn.Dropout with the mask drawn as `rand >= p` (one uniform per element) and applied in
    x's dtype: same distribution and scaling as `F.dropout`, faster on the CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = torch.rand(x.shape, device=x.device) >= self.p  # (...,) bool, P(keep) = 1 - p
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
        notes.append(f"{swapped} dropout modules draw their masks with rand (MaskDropout)")
    if precision == "bf16":
        readable = 0
        for module in model.modules():
            if isinstance(module, MultiHeadedAttention) and module.fused:
                module.fused = False
                readable += 1
        if readable:
            notes.append(f"{readable} attention modules take the readable bf16 path")
    return notes


__all__ = ["MaskDropout", "prepare_for_training"]
