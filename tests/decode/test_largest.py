"""The block-by-block largest entries (`decode.largest`) against torch's own `argmax` and `topk`, on
rows wide enough to take the block path, with and without a tail that fills no block, ties within
a block, across blocks and in the tail, and rows of -inf."""

from __future__ import annotations

import math

import pytest
import torch

from qkv.decode.largest import BLOCK, FEW_ROWS, SHORT, first_max_index, top_k


def rows(n: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.log_softmax(torch.randn(n, width, generator=torch.Generator().manual_seed(seed)), -1)


@pytest.mark.parametrize("width", [SHORT, 1000, 8000, 8192 + 7])
@pytest.mark.parametrize("n", [1, FEW_ROWS, 33])
def test_first_max_index_is_argmax(n: int, width: int) -> None:
    x = rows(n, width)
    assert torch.equal(first_max_index(x), x.argmax(-1))


def test_first_max_index_takes_the_first_of_a_tie_wherever_it_lies() -> None:
    x = rows(8, 1000, seed=1)  # 15 blocks of 64 and a tail of 40
    tail = 1000 // BLOCK * BLOCK
    x[0, [BLOCK + 3, BLOCK + 9]] = 1.0  # in one block
    x[1, [5 * BLOCK + 1, 2 * BLOCK + 60]] = 1.0  # in two blocks: the earlier block's
    x[2, [7, tail + 3]] = 1.0  # a block and the tail: the block's
    x[3, tail + 5] = 1.0  # the tail alone
    x[3, tail + 9] = 1.0
    x[4] = -math.inf  # every token forbidden but one
    x[4, 999] = 0.0
    x[5] = -1.0  # all tied
    x[6] = -math.inf  # all forbidden
    got = first_max_index(x)
    assert torch.equal(got, x.argmax(-1))
    assert got[:7].tolist() == [BLOCK + 3, 2 * BLOCK + 60, 7, tail + 5, 999, 0, 0]


@pytest.mark.parametrize("width", [4000, 4 * 8 * BLOCK, 32000, 32000 + 13])
@pytest.mark.parametrize("k", [1, 8])
def test_top_k_is_topk(width: int, k: int) -> None:
    x = rows(6, width, seed=2)
    values, indices = top_k(x, k)
    want_values, want_indices = x.topk(k, dim=1)
    assert torch.equal(values, want_values)
    assert torch.equal(indices, want_indices)  # distinct values: the same indices


def test_top_k_keeps_every_tied_value_and_a_tail() -> None:
    x = rows(4, 32000 + 13, seed=3)
    x[0, [5, 70, 31000, 32005]] = 2.0  # four tied in blocks and the tail, k = 8
    x[1, 32000:] = 3.0  # the tail holds the 8 largest
    x[2] = -math.inf  # one finite entry
    x[2, 12345] = -0.5
    values, indices = top_k(x, 8)
    want, _ = x.topk(8, dim=1)
    assert torch.equal(values, want)
    assert torch.equal(x.gather(1, indices), values)  # each index holds its value
    assert sorted(indices[0, :4].tolist()) == [5, 70, 31000, 32005]
    assert set(indices[1].tolist()) <= set(range(32000, 32013))
    assert indices[2, 0] == 12345 and len(set(indices[2].tolist())) == 8
