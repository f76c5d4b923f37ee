"""Hard word alignments from cross-attention: which source word each output word looked at most.

    qkv translate --alignment    ->  "translation<TAB>0-0 1-2 2-1"   (source word - target word)

The pairs use the Pharaoh format of fast_align and Marian, over whitespace-separated words as users
count them, not subwords: each target word is linked to the source word that received the most of
its pieces' mean attention, so each target word gets exactly one link.

Details: docs/search.md, "Word alignments".
"""

from __future__ import annotations

import torch
from torch import Tensor

WORD_START = "\u2581"  # "▁": SentencePiece's mark of a piece that follows a space


def word_index(pieces: list[str]) -> list[int]:
    """The word (0-based) of each piece: the pieces joined, "▁" read as a space, split on spaces.

    A piece belongs to the word of its first other character: one that starts with "▁" (or comes
    first, or after a space) starts a new word; a piece of "▁" alone goes with the word after it."""
    words, current, in_word, spaces = [], -1, False, 0  # spaces: pieces waiting for their word
    for piece in pieces:
        text = piece.replace(WORD_START, " ")
        if not text.strip():
            spaces += 1
            in_word = False
            continue
        if text[0] == " " or not in_word:
            current += 1
        words += [current] * (spaces + 1)
        spaces, in_word = 0, text[-1] != " "
    return words + [max(current, 0)] * spaces  # trailing spaces: with the last word


def word_attention(attention: Tensor, source_pieces: list[str], target_pieces: list[str]) -> Tensor:
    """Piece-level attention (T, S) -> word-level attention (target words, source words)."""
    if attention.shape != (len(target_pieces), len(source_pieces)):
        raise ValueError(
            f"attention {tuple(attention.shape)} does not match {len(target_pieces)} target and "
            f"{len(source_pieces)} source pieces"
        )
    src_words = torch.tensor(word_index(source_pieces))  # (S,)
    tgt_words = torch.tensor(word_index(target_pieces))  # (T,)
    n_src = int(src_words.max()) + 1 if len(source_pieces) else 0
    n_tgt = int(tgt_words.max()) + 1 if len(target_pieces) else 0
    attention = attention.double()
    per_source_word = attention.new_zeros(len(target_pieces), n_src)
    per_source_word.index_add_(1, src_words, attention)  # (T, source words): sums
    summed = attention.new_zeros(n_tgt, n_src).index_add_(0, tgt_words, per_source_word)
    pieces_per_word = torch.bincount(tgt_words, minlength=n_tgt).to(summed.dtype)
    return summed / pieces_per_word[:, None]  # (target words, source words): means


def hard_alignment(
    attention: Tensor, source_pieces: list[str], target_pieces: list[str]
) -> list[tuple[int, int]]:
    """(source word, target word) pairs, one per target word, sorted by target word.

    attention (T, S): rows the target pieces, columns the source pieces, eos excluded on both sides
    (rows and columns of eos are dropped by the caller).
    """
    if not target_pieces or not source_pieces:
        return []
    words = word_attention(attention, source_pieces, target_pieces)
    return [(i, j) for j, i in enumerate(words.argmax(dim=1).tolist())]


def format_alignment(pairs: list[tuple[int, int]]) -> str:
    """Pairs as fast_align and Marian write them: "0-0 1-2 2-1"."""
    return " ".join(f"{s}-{t}" for s, t in pairs)


__all__ = ["format_alignment", "hard_alignment", "word_attention", "word_index"]
