"""Label-smoothed cross entropy (paper 5.4, eps_ls = 0.1), summed over the real (non-pad) target tokens.

    loss = (1 - eps) * (-log p(y)) + eps * mean_k(-log p(k))

the definition `F.cross_entropy(..., label_smoothing=eps)` uses, written out so that one log-softmax serves
both the smoothed loss and the plain NLL (for perplexity): over a large vocabulary the log-softmax is a good
part of a small model's step. Sums, not means, are returned so that batches accumulated over several steps
(or devices) can be divided by their total token count exactly once.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, pad_id: int, epsilon: float = 0.1) -> tuple[Tensor, Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, plain NLL sum) over non-pad targets."""
    real = target.flatten() != pad_id  # (N,)
    logp = F.log_softmax(logits.flatten(0, 1)[real].float(), dim=-1)  # (n, V), real tokens only
    nll = -logp.gather(1, target.flatten()[real][:, None]).squeeze(1)  # (n,)
    smooth = -logp.mean(dim=-1)  # (n,)
    loss = ((1.0 - epsilon) * nll + epsilon * smooth).sum()
    return loss, nll.detach().sum()
