"""Label-smoothed cross entropy (paper 5.4, eps_ls = 0.1), summed over the real (non-pad) target tokens.

    loss = (1 - eps) * (-log p(y)) + eps * mean_k(-log p(k))

the definition `F.cross_entropy(..., label_smoothing=eps)` uses, written out so that one log-softmax serves
both the smoothed loss and the plain NLL (for perplexity): over a large vocabulary the log-softmax is a good
part of a small model's step. Sums, not means, are returned so that batches accumulated over several steps
(or devices) can be divided by their total token count exactly once.

In training the loss starts from the decoder's hidden states instead of the logits
(`label_smoothed_loss_from_hidden`): the pad positions are dropped before the output projection, and the
projection + log-softmax can run in chunks of tokens that are recomputed in the backward pass, so that the
(tokens x vocabulary) logits never exist at once — at d_model 128 and a 10k vocabulary they are most of a
step's memory traffic.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


def _sums(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """logits (n, V), target (n,) -> (smoothed loss sum, plain NLL sum)."""
    logp = F.log_softmax(logits.float(), dim=-1)  # (n, V)
    nll = -logp.gather(1, target[:, None]).squeeze(1)  # (n,)
    smooth = -logp.mean(dim=-1)  # (n,)
    return ((1.0 - epsilon) * nll + epsilon * smooth).sum(), nll.detach().sum()


def label_smoothed_loss(logits: Tensor, target: Tensor, pad_id: int, epsilon: float = 0.1) -> tuple[Tensor, Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, plain NLL sum) over non-pad targets."""
    real = target.flatten() != pad_id  # (N,)
    return _sums(logits.flatten(0, 1)[real], target.flatten()[real], epsilon)


def label_smoothed_loss_from_hidden(hidden: Tensor, generator: nn.Module, target: Tensor, pad_id: int,
                                    epsilon: float = 0.1, chunk_tokens: int | None = None) -> tuple[Tensor, Tensor]:
    """hidden (B, T, D) -> generator -> the loss of `label_smoothed_loss`, without the pad positions' logits.
    With chunk_tokens, `chunk_tokens` real tokens at a time, each chunk's logits recomputed in backward."""
    real = target != pad_id  # (B, T)
    h, y = hidden[real], target[real]  # (n, D), (n,)
    if not chunk_tokens or len(y) <= chunk_tokens:
        return _sums(generator(h), y, epsilon)
    loss = nll = None
    for i in range(0, len(y), chunk_tokens):
        part, part_nll = checkpoint(lambda h_, y_: _sums(generator(h_), y_, epsilon), h[i : i + chunk_tokens],
                                    y[i : i + chunk_tokens], use_reentrant=False)
        loss, nll = (part, part_nll) if loss is None else (loss + part, nll + part_nll)
    return loss, nll
