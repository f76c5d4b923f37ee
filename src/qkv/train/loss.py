"""Label-smoothed cross entropy (paper 5.4, eps_ls = 0.1), summed over the real target tokens.

    loss = (1 - eps) * (-log p(y)) + eps * mean_k(-log p(k))

the definition `F.cross_entropy(..., label_smoothing=eps)` uses, written out so that one log-softmax
serves both the smoothed loss and the plain NLL (for perplexity). Sums, not means, are returned
so that batches accumulated over steps (or devices) are divided by their total token count once.

In training the loss starts from the decoder's hidden states instead of the logits
(`TranslationLoss`, `label_smoothed_loss_from_hidden`): the pad positions are dropped before the
output projection, and the projection + log-softmax can run in chunks of tokens, so that the
(tokens x vocabulary) logits never exist at once. A linear projection's chunks compute their
gradients as they go (`_ChunkedLinearLoss`: d loss / d logits = softmax - the smoothed target, no
logits kept or recomputed); another projection's chunks are recomputed in the backward pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..model import DecoderOnly, EncoderOnly, Transformer
from ..model.masks import padding_mask
from ..model.rnn import RNNSearch


def _sums(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """logits (n, V), target (n,) -> (smoothed loss sum, plain NLL sum)."""
    logp = F.log_softmax(logits.float(), dim=-1)  # (n, V)
    nll = -logp.gather(1, target[:, None]).squeeze(1)  # (n,)
    smooth = -logp.mean(dim=-1)  # (n,)
    return ((1.0 - epsilon) * nll + epsilon * smooth).sum(), nll.detach().sum()


def label_smoothed_loss(
    logits: Tensor, target: Tensor, pad_id: int, epsilon: float = 0.1
) -> tuple[Tensor, Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, plain NLL sum) over the non-pad
    targets."""
    real = target.flatten() != pad_id  # (N,)
    return _sums(logits.flatten(0, 1)[real], target.flatten()[real], epsilon)


def label_smoothed_loss_from_hidden(
    hidden: Tensor,
    projection: nn.Module,
    target: Tensor,
    pad_id: int,
    epsilon: float = 0.1,
    chunk_tokens: int | None = None,
) -> tuple[Tensor, Tensor]:
    """hidden (B, T, D) -> projection -> the loss of `label_smoothed_loss`, without the pad
    positions' logits. With chunk_tokens, that many real tokens at a time, each chunk's logits
    recomputed in the backward pass."""
    real = target != pad_id  # (B, T)
    h = hidden[real]  # (n, D)
    y = target[real]  # (n,)
    if not chunk_tokens or len(y) <= chunk_tokens:
        return _sums(projection(h), y, epsilon)

    def chunk_sums(h_part: Tensor, y_part: Tensor) -> tuple[Tensor, Tensor]:
        return _sums(projection(h_part), y_part, epsilon)

    if isinstance(projection, nn.Linear) and torch.is_grad_enabled():
        args = (h, projection.weight, projection.bias, y, epsilon, chunk_tokens)
        return _ChunkedLinearLoss.apply(*args)
    loss = nll = None
    for i in range(0, len(y), chunk_tokens):
        part = slice(i, i + chunk_tokens)
        part_loss, part_nll = checkpoint(chunk_sums, h[part], y[part], use_reentrant=False)
        loss = part_loss if loss is None else loss + part_loss
        nll = part_nll if nll is None else nll + part_nll
    return loss, nll


class _ChunkedLinearLoss(torch.autograd.Function):
    """h (n, D), weight (V, D), bias (V,) or None, y (n,) -> the `_sums` of h weightᵀ + bias,
    `chunk` rows at a time, each chunk's gradients computed with its loss: for logits z, softmax
    p and the smoothed target q = (1 - eps) onehot(y) + eps / V, d loss / dz = p - q, so
    dh = (p - q) weight, dweight = (p - q)ᵀ h, dbias = Σ (p - q). Under autocast the products run
    in its dtype, as `F.linear` would; the sums and gradients stay float32."""

    @staticmethod
    def forward(ctx, h, weight, bias, y, epsilon, chunk):  # type: ignore[override]
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else h.dtype
        w = weight.to(dtype)
        grad_h, grad_w = torch.empty_like(h), torch.zeros_like(weight, dtype=torch.float32)
        grad_b = None if bias is None else torch.zeros_like(bias, dtype=torch.float32)
        loss, nll = h.new_zeros((), dtype=torch.float32), h.new_zeros((), dtype=torch.float32)
        z_all = torch.empty(min(chunk, len(y)), w.size(0), device=h.device)  # one (c, V) buffer
        with torch.autocast("cpu", enabled=False):
            for i in range(0, len(y), chunk):
                hp, yp = h[i : i + chunk].to(dtype), y[i : i + chunk]
                g = _logits(z_all[: len(yp)], hp, w, bias)  # (c, V) float32
                part_nll, part_loss = _softmax_minus_target_(g, yp, epsilon)
                loss += part_loss
                nll += part_nll
                grad_h[i : i + chunk] = (g.to(dtype) @ w).to(h.dtype)
                if dtype == grad_w.dtype:
                    grad_w.addmm_(g.T, hp)
                else:  # products in the autocast dtype, the sum over chunks in float32
                    grad_w += (g.T.to(dtype) @ hp).float()
                if grad_b is not None:
                    grad_b += g.sum(0)
        ctx.save_for_backward(grad_h, grad_w.to(weight.dtype), grad_b)
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):  # type: ignore[override]
        grad_h, grad_w, grad_b = ctx.saved_tensors  # used once: scaled in place, no copies
        bias = grad_b.to(grad_w.dtype).mul_(grad_loss) if ctx.has_bias else None
        return grad_h.mul_(grad_loss), grad_w.mul_(grad_loss), bias, None, None, None


def _logits(out: Tensor, h: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """h (c, D) w (V, D)ᵀ + bias, in float32, written into `out` (c, V): one buffer for every
    chunk, no fresh pages to fault in for each."""
    if h.dtype == out.dtype:
        if bias is None:
            return torch.mm(h, w.T, out=out)
        return torch.addmm(bias.to(out.dtype), h, w.T, out=out)
    out.copy_(h @ w.T)  # the product in the autocast dtype
    return out if bias is None else out.add_(bias.float())


def _softmax_minus_target_(z: Tensor, y: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Logits z (c, V) made, in place, d loss / d z = softmax(z) - q, q the smoothed target;
    returns the NLL sum and the smoothed loss sum, (1 - eps) nll - eps mean_k log p(k)."""
    rows = torch.arange(len(y), device=z.device)
    z_y, z_mean = z[rows, y], z.mean(dim=-1)  # (c,), (c,)
    top = z.amax(dim=-1, keepdim=True)  # (c, 1)
    total = z.sub_(top).exp_().sum(dim=-1, keepdim=True)  # z: exp(z - top)
    lse = (top + total.log()).squeeze(1)  # (c,) log Σ exp z
    part_nll = lse - z_y
    part_loss = ((1.0 - epsilon) * part_nll - epsilon * (z_mean - lse)).sum()
    z.div_(total).sub_(epsilon / z.size(1))  # p - eps / V
    z[rows, y] -= 1.0 - epsilon
    return part_nll.sum(), part_loss


class TranslationLoss(nn.Module):
    """An encoder-decoder's training objective (a Transformer, or the RNN of `model.arch: rnn`):
    (src, tgt_in, tgt_out) -> (loss sum, NLL sum).

        memory = model.encode(src)                    # (B, S, D)
        hidden = model.decoder(tgt_in, memory)        # (B, T, D)
        loss   = label-smoothed cross entropy of model.output_projection(hidden) vs tgt_out

    Training wraps this module (not the bare model) in DistributedDataParallel, so that every
    parameter the loss reaches, the output projection included, is synchronized across devices.

    label_smoothing: eps_ls. chunk_tokens: run the output projection and the loss this many target
    tokens at a time, recomputing each chunk's logits in the backward pass: less memory for a slower
    step (docs/benchmarks.md); None: all at once.
    """

    def __init__(
        self,
        model: Transformer | RNNSearch,
        label_smoothing: float = 0.1,
        chunk_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.chunk_tokens = chunk_tokens

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S), tgt_in (B, T), tgt_out (B, T) -> (loss sum, NLL sum) over non-pad tgt_out."""
        pad_id = self.model.config.pad_id
        src_mask = padding_mask(src, pad_id)
        memory = self.model.encode(src, src_mask)  # (B, S, D)
        hidden, _ = self.model.decoder(tgt_in, memory, src_mask)  # (B, T, D)
        return label_smoothed_loss_from_hidden(
            hidden,
            self.model.output_projection,
            tgt_out,
            pad_id,
            self.label_smoothing,
            self.chunk_tokens,
        )


class LanguageModelLoss(nn.Module):
    """A decoder-only model's objective: the next-token cross entropy of a causal language model.

        hidden = model.decoder(inputs)              # (B, T, D), position t sees inputs <= t
        loss   = label-smoothed cross entropy of model.lm_head(hidden) vs targets

    inputs (B, T) = [bos] + text ids, targets (B, T) = text ids + [eos]: the same sequence shifted
    by one, right-padded. Returns (loss sum, NLL sum) over the non-pad targets.
    """

    def __init__(
        self, model: DecoderOnly, label_smoothing: float = 0.0, chunk_tokens: int | None = None
    ) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.chunk_tokens = chunk_tokens

    def forward(self, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        hidden, _ = self.model.decoder(inputs)  # (B, T, D)
        pad_id = self.model.config.pad_id
        return label_smoothed_loss_from_hidden(
            hidden, self.model.lm_head, targets, pad_id, self.label_smoothing, self.chunk_tokens
        )


class MaskedLMLoss(nn.Module):
    """An encoder-only model's pretraining objective (BERT's masked LM): predict the original id
    at each corrupted position.

    inputs (B, S): corrupted ids; targets (B, S): the original id where the input was chosen for
    corruption, pad elsewhere. Only the chosen positions go through the output layer.
    """

    def __init__(self, model: EncoderOnly, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        hidden = self.model.encoder(inputs)  # (B, S, D)
        chosen = targets != self.model.config.pad_id  # (B, S)
        logits = self.model.mlm_output(hidden[chosen])  # (n, V)
        return _sums(logits, targets[chosen], self.label_smoothing)


class ClassificationLoss(nn.Module):
    """An encoder-only classifier's objective: ids (B, S), labels (B,) -> (loss sum, NLL sum) of
    the class logits (label smoothing spreads eps over the classes)."""

    def __init__(self, model: EncoderOnly, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, inputs: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        return _sums(self.model.classify(inputs), labels, self.label_smoothing)
