"""Hard word alignments from cross-attention (`qkv.decode.alignment`): hand-made matrices with words of
several pieces, and the word-level matrix against a loop over the pieces."""

from __future__ import annotations

import pytest
import torch

from qkv.decode.alignment import format_alignment, hard_alignment, word_attention, word_index

SOURCE = ["▁The", "▁bi", "cycle", "▁is", "▁red", "."]  # words: The, bicycle, is, red.
TARGET = ["▁Das", "▁Fahr", "rad", "▁ist", "▁rot", "."]  # words: Das, Fahrrad, ist, rot.


def test_pieces_join_into_whitespace_words() -> None:
    assert word_index(SOURCE) == [0, 1, 1, 2, 3, 3]
    assert word_index(["▁A", "▁", "ma", "n"]) == [0, 1, 1, 1]  # a lone "▁" starts a word (byte fallback)
    assert word_index(["四千", "零", "▁五"]) == [0, 0, 1]  # the first piece starts a word without "▁"
    assert word_index(["▁", "▁x", "y", "▁"]) == [0, 0, 0, 0]  # space-only pieces: no word of their own
    assert word_index([]) == []
    for pieces in (SOURCE, TARGET, ["▁", "▁x", "▁", "▁", "y▁", "z"], ["a", "▁", "b"]):
        text = "".join(pieces).replace("▁", " ")
        assert max(word_index(pieces)) + 1 == len(text.split())  # the whitespace words of the text


def test_hard_alignment_of_a_hand_made_matrix() -> None:
    #                 The   bi    cycle is    red   .
    attention = torch.tensor([
        [0.90, 0.02, 0.02, 0.02, 0.02, 0.02],   # Das   -> The
        [0.35, 0.33, 0.32, 0.00, 0.00, 0.00],   # Fahr: its largest piece is "The", its largest word "bicycle"
        [0.05, 0.05, 0.90, 0.00, 0.00, 0.00],   # rad   -> bicycle
        [0.10, 0.00, 0.00, 0.20, 0.40, 0.30],   # ist   -> red. (0.7 over its two pieces)
        [0.00, 0.00, 0.00, 0.50, 0.25, 0.25],   # rot   -> is 0.5 vs red. 0.5 here, but with "." below:
        [0.00, 0.00, 0.00, 0.60, 0.10, 0.30],   # .     -> is: the word "rot." averages to is 0.55, red. 0.45
    ])
    words = word_attention(attention, SOURCE, TARGET)
    assert words.shape == (4, 4)
    torch.testing.assert_close(words[1], torch.tensor([0.2, 0.8, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(words[3], torch.tensor([0.0, 0.0, 0.55, 0.45], dtype=torch.float64))
    pairs = hard_alignment(attention, SOURCE, TARGET)
    assert pairs == [(0, 0), (1, 1), (3, 2), (2, 3)]  # (source word, target word), one per target word
    assert format_alignment(pairs) == "0-0 1-1 3-2 2-3"
    assert hard_alignment(attention[:0], SOURCE, []) == []
    with pytest.raises(ValueError, match="does not match"):
        hard_alignment(attention[:, :5], SOURCE, TARGET)


def test_word_attention_equals_a_loop_over_the_pieces() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        n_src, n_tgt = torch.randint(1, 12, (2,), generator=g).tolist()
        source = [("▁" if torch.rand(1, generator=g) < 0.5 else "") + "x" for _ in range(n_src)]
        target = [("▁" if torch.rand(1, generator=g) < 0.5 else "") + "y" for _ in range(n_tgt)]
        attention = torch.rand(n_tgt, n_src, generator=g).softmax(-1)
        src_words, tgt_words = word_index(source), word_index(target)
        expected = torch.zeros(max(tgt_words) + 1, max(src_words) + 1, dtype=torch.float64)
        for j in range(expected.size(0)):
            rows = [t for t in range(n_tgt) if tgt_words[t] == j]
            for i in range(expected.size(1)):
                cols = [s for s in range(n_src) if src_words[s] == i]
                expected[j, i] = sum(float(attention[t, s]) for t in rows for s in cols) / len(rows)
        torch.testing.assert_close(word_attention(attention, source, target), expected)
        assert [s for s, _ in hard_alignment(attention, source, target)] == expected.argmax(1).tolist()
