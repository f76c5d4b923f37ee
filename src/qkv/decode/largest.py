"""The largest entries of each row of a wide tensor, found block by block: what `torch.max` and
`torch.topk` give, for the (R, V) log-probs a decoding step picks from.

ATen's CPU kernels for `max(dim)` (with its index) and `topk` run an element at a time, while `amax`
(the value only) runs at the speed of memory: so both functions take each block of `BLOCK` entries'
largest value with `amax`, then look for the answer in a few blocks only. Short rows (`SHORT`), few
rows (`FEW_ROWS`) and tensors off the CPU take torch's kernel.

Details: docs/search.md, "The largest entries, block by block"; measurements: docs/benchmarks.md,
"The search's reductions".
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 64  # entries per block
SHORT = 8 * BLOCK  # rows shorter than this: torch's kernel
FEW_ROWS = 4  # most_probable on fewer rows: torch's kernel (its cost there is the call's)


def first_max_index(x: Tensor) -> Tensor:
    """Each row's index of its largest entry, the first of a tie, as `x.max(-1).indices`:
    (R, V) -> (R,)."""
    R, V = x.shape
    whole = V // BLOCK * BLOCK
    if R < FEW_ROWS or V < SHORT or x.device.type != "cpu":
        return x.max(-1).indices
    block = x.unfold(1, BLOCK, BLOCK).amax(-1).max(-1).indices  # (R,) first block with the max
    columns = block[:, None] * BLOCK + torch.arange(BLOCK, device=x.device)  # (R, BLOCK)
    value, offset = x.gather(1, columns).max(-1)  # (R,)
    index = block * BLOCK + offset
    if whole < V:  # the tail wins only when larger: its indices come after
        tail_value, tail_offset = x[:, whole:].max(-1)
        index = torch.where(tail_value > value, whole + tail_offset, index)
    return index


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Each row's k largest entries and their indices, largest first, as `x.topk(k, dim=1)`
    (among equal entries, which index comes first may differ): (R, N) -> (R, k), (R, k)."""
    R, width = x.shape  # (R, N)
    whole = width // BLOCK * BLOCK
    if width < max(SHORT, 4 * k * BLOCK) or x.device.type != "cpu":  # few blocks: no gain
        return x.topk(k, dim=1)
    blocks = x.unfold(1, BLOCK, BLOCK).amax(-1).topk(k, dim=1).indices  # (R, k)
    columns = blocks[:, :, None] * BLOCK + torch.arange(BLOCK, device=x.device)  # (R, k, BLOCK)
    columns = columns.view(R, k * BLOCK)
    if whole < width:
        tail = torch.arange(whole, width, device=x.device).expand(R, width - whole)
        columns = torch.cat([columns, tail], dim=1)
    values, where = x.gather(1, columns).topk(k, dim=1)  # (R, k)
    return values, columns.gather(1, where)


__all__ = ["BLOCK", "first_max_index", "top_k"]
