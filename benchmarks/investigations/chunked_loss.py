"""The label-smoothed loss of an OPUS-MT-sized output projection (d_model 512, 58,101 tokens) from
the decoder's hidden states, forward and backward: all logits at once, in chunks recomputed in the
backward pass (any projection module), and in chunks whose gradients are computed with their loss
(a linear projection: what `loss_chunk_tokens` does). Seconds (the second best of 4) and the peak
RSS growth of each, alternated twice.

    python -m benchmarks.investigations.chunked_loss [--tokens 3500] [--chunk 1024]
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from torch import nn

from benchmarks import common
from qkv.train.loss import label_smoothed_loss_from_hidden

D_MODEL, VOCAB = 512, 58_101


def timed(kind: str, h: torch.Tensor, y: torch.Tensor, linear: nn.Linear, chunk: int) -> float:
    """Seconds of one forward + backward of the loss (the second best of 4)."""
    projection = nn.Sequential(linear) if kind == "recomputed" else linear
    size = None if kind == "whole" else chunk
    seconds = []
    for _ in range(4):
        start = time.perf_counter()
        loss, _ = label_smoothed_loss_from_hidden(h, projection, y, 0, 0.1, size)
        loss.backward()
        seconds.append(time.perf_counter() - start)
        h.grad = None
        linear.zero_grad(set_to_none=True)
    return sorted(seconds)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=3500, help="real target tokens")
    parser.add_argument("--chunk", type=int, default=1024, help="tokens per chunk")
    args = parser.parse_args()
    print(common.describe(common.machine(), common.versions("torch")))
    torch.manual_seed(0)
    linear = nn.Linear(D_MODEL, VOCAB)
    h = torch.randn(1, args.tokens, D_MODEL, requires_grad=True)
    y = torch.randint(1, VOCAB, (1, args.tokens))
    for kind in ("chunked", "recomputed", "whole") * 2:  # whole last: its peak is the largest
        seconds = timed(kind, h, y, linear, args.chunk)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{kind:>10}: {seconds:.2f} s   peak RSS so far {peak:,.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
