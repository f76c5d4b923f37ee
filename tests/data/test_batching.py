import numpy as np
import pytest
import torch

from qkv.data.batching import TokenBatchSampler, collate, pad_sequences

PAD, BOS, EOS = 0, 2, 3


def translation_lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Source lengths log-normal (median 20), target lengths 0.8-1.25 times the source lengths."""
    rng = np.random.default_rng(seed)
    src = np.clip(rng.lognormal(3.0, 0.6, n).astype(int), 1, 150)
    tgt = np.maximum(1, (src * rng.uniform(0.8, 1.25, n)).astype(int))
    return src, tgt


def padding_fraction(batches: list[list[int]], src: np.ndarray, tgt: np.ndarray) -> float:
    """Pad positions / all positions of the src and tgt tensors that `collate` would build."""
    padded = sum(len(b) * ((src[b].max() + 1) + (tgt[b].max() + 2)) for b in batches)
    return 1 - ((src + 1).sum() + (tgt + 2).sum()) / padded


def test_collate_adds_specials_and_pads():
    batch = collate([([5, 6, 7], [8]), ([9], [10, 11, 12])], PAD, BOS, EOS, indices=[4, 1])
    assert torch.equal(batch.src, torch.tensor([[5, 6, 7, EOS], [9, EOS, PAD, PAD]]))
    assert torch.equal(batch.tgt, torch.tensor([[BOS, 8, EOS, PAD, PAD], [BOS, 10, 11, 12, EOS]]))
    assert batch.src.dtype == batch.tgt.dtype == torch.long
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (6, 6)
    assert int((batch.tgt[:, 1:] != PAD).sum()) == batch.n_tgt_tokens
    assert batch.indices == [4, 1]
    assert collate([([5], [6])], PAD, BOS, EOS).indices == [0]


def test_pad_sequences_matches_padding_row_by_row():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(1, 1000, size=n).tolist() for n in [5, 0, 17, 1, 17, 3]]
    expected = torch.full((len(seqs), 17), -1, dtype=torch.long)
    for row, seq in enumerate(seqs):
        expected[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    padded = pad_sequences(seqs, pad_id=-1)
    assert padded.dtype == torch.long
    assert torch.equal(padded, expected)
    assert pad_sequences([[], []], pad_id=0).shape == (2, 0)


def test_no_batch_exceeds_max_tokens_and_batches_are_full():
    src, tgt = translation_lengths(3000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=1000)
    fill = []
    for indices in sampler:
        batch = collate([([7] * src[i], [7] * tgt[i]) for i in indices], PAD, BOS, EOS, indices)
        padded = max(batch.src.numel(), batch.tgt.numel())
        assert padded <= 1000
        fill.append(padded / 1000)
    assert np.mean(fill) > 0.9


def test_every_example_once_per_epoch():
    src, tgt = translation_lengths(2000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=800)
    for _ in range(3):
        indices = [i for batch in sampler for i in batch]
        assert sorted(indices) == list(range(2000))
    assert sampler.epoch == 3


def test_epochs_differ_and_seeds_reproduce():
    src, tgt = translation_lengths(2000)
    a, b, c = (TokenBatchSampler(src, tgt, max_tokens=800, seed=s) for s in (0, 0, 1))
    a0, a1 = list(a), list(a)
    assert a0 != a1
    assert list(b) == a0 and list(b) == a1
    assert list(c) != a0
    assert len(a0) == len(a1) == len(a)  # same batch boundaries in every epoch


def test_set_epoch():
    src, tgt = translation_lengths(500)
    a, b = TokenBatchSampler(src, tgt, max_tokens=500), TokenBatchSampler(src, tgt, max_tokens=500)
    list(a)
    b.set_epoch(1)
    assert list(a) == list(b)


def test_resume_mid_epoch_continues_identically():
    src, tgt = translation_lengths(2000)
    reference = TokenBatchSampler(src, tgt, max_tokens=800, seed=3)
    uninterrupted = list(reference) + list(reference)

    first = TokenBatchSampler(src, tgt, max_tokens=800, seed=3)
    consumed = []
    for batch in first:
        consumed.append(batch)
        if len(consumed) == 17:
            break
    state = first.state_dict()
    assert state == {"epoch": 0, "position": 17}

    resumed = TokenBatchSampler(src, tgt, max_tokens=800, seed=3)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # a training loop calling set_epoch for the resumed epoch must not restart it
    assert consumed + list(resumed) + list(resumed) == uninterrupted


def test_length_bucketing_keeps_padding_small():
    src, tgt = translation_lengths(20000)
    batches = list(TokenBatchSampler(src, tgt, max_tokens=4096))
    assert padding_fraction(batches, src, tgt) < 0.10
    shuffled = np.random.default_rng(0).permutation(20000)  # same batch sizes, lengths not sorted
    unsorted = np.split(shuffled, np.cumsum([len(b) for b in batches])[:-1])
    assert padding_fraction(unsorted, src, tgt) > 0.4


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_partition_the_global_batches(world_size):
    src, tgt = translation_lengths(2000)
    ranks = [
        TokenBatchSampler(src, tgt, max_tokens=800, seed=5, rank=r, world_size=world_size) for r in range(world_size)
    ]
    global_batches = [b.tolist() for b in ranks[0].global_batches(epoch=0)]
    per_rank = [list(sampler) for sampler in ranks]
    assert len({len(batches) for batches in per_rank}) == 1
    assert len(per_rank[0]) == len(global_batches) // world_size
    dealt = [batch for step in zip(*per_rank, strict=True) for batch in step]
    assert dealt == global_batches[: len(dealt)]


def test_no_shuffle_gives_length_order():
    src, tgt = translation_lengths(1000)
    batches = list(TokenBatchSampler(src, tgt, max_tokens=600, shuffle=False))
    order = [i for batch in batches for i in batch]
    assert batches == list(TokenBatchSampler(src, tgt, max_tokens=600, shuffle=False))
    assert list(tgt[order]) == sorted(tgt)


def test_too_long_example_raises():
    with pytest.raises(ValueError, match="example 2 "):
        TokenBatchSampler([3, 4, 99, 5], [3, 4, 5, 5], max_tokens=50)


def test_empty_dataset_has_no_batches():
    sampler = TokenBatchSampler([], [], max_tokens=100)
    assert len(sampler) == 0 and list(sampler) == []


def test_set_lengths_recuts_the_batches_and_keeps_the_position():
    src, tgt = translation_lengths(2000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=800, seed=3)
    next(iter(sampler))
    longer_src, longer_tgt = src + 5, tgt + 5  # as a re-segmentation into smaller pieces makes them
    sampler.set_lengths(longer_src, longer_tgt)
    assert (sampler.epoch, sampler.position) == (0, 1)
    fresh = TokenBatchSampler(longer_src, longer_tgt, max_tokens=800, seed=3)
    assert sampler.rank_batches(0) == fresh.rank_batches(0) != TokenBatchSampler(src, tgt, 800, seed=3).rank_batches(0)
    for indices in sampler.rank_batches(0):
        assert len(indices) * max(longer_src[indices].max() + 1, longer_tgt[indices].max() + 2) <= 800
    with pytest.raises(ValueError, match="1999 source lengths but 2000"):
        sampler.set_lengths(src[1:], tgt)
