"""Label-smoothed cross entropy (paper 5.4, eps_ls = 0.1), summed over the real (non-pad) target tokens.

    loss = (1 - eps) * (-log p(y)) + eps * mean_k(-log p(k))

This is `F.cross_entropy(..., label_smoothing=eps)`; the sum, not the mean, is returned so that batches
accumulated over several steps (or devices) can be divided by their total token count exactly once.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, pad_id: int, epsilon: float = 0.1) -> tuple[Tensor, Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, plain NLL sum) over non-pad targets."""
    flat_logits, flat_target = logits.flatten(0, 1).float(), target.flatten()
    loss = F.cross_entropy(flat_logits, flat_target, ignore_index=pad_id, label_smoothing=epsilon, reduction="sum")
    nll = F.cross_entropy(flat_logits.detach(), flat_target, ignore_index=pad_id, reduction="sum")
    return loss, nll
