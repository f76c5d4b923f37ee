"""Dropout (Srivastava et al. 2014), as used after every sub-layer and on the embeddings (paper §5.4).

    Dropout(x) = x * m / (1 - p),   m ~ Bernoulli(1 - p) elementwise, in training only

PyTorch's CPU `bernoulli_` draws its mask about 3x slower than uniform sampling does (10 ms against 3.5 ms
for 1M elements on 2 cores), and with dropout after every sub-layer the mask is ~10% of a small model's
training step in a profile (end to end on that recipe the gain stayed within run-to-run noise; docs/benchmarks.md).
So on the CPU the mask is drawn as `rand >= p`: the same distribution from a faster sampler.
On other devices (fused CUDA kernels) and in eval mode this is `nn.Dropout`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """`nn.Dropout` whose CPU mask comes from `torch.rand`. (*) -> (*), same shape."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.inplace:
            return super().forward(x)
        if self.p == 1.0:
            return x * 0.0
        scaled_mask = torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))  # (*) of 0 or 1/(1-p), in place
        return x * scaled_mask
