"""Paragraphs cut into sentences and joined again: the pieces always concatenate back to the text,
spacing and line breaks (LF, CRLF, blank lines) are kept around the translations, and Chinese
sentence ends are found."""

from __future__ import annotations

import gzip
import random

import pytest

from qkv.apps.documents import split_lines, split_sentences
from shared_corpora import SHARED_DATA

DATA = SHARED_DATA

TEXTS = [
    "Hello there.  How are you?\nFine, thanks!",
    "  Leading and trailing spaces.   Two sentences here.  ",
    "Line one.\r\nLine two. Still line two.\r\n\r\nAfter a blank line.",
    "\n\n\n",
    "",
    "No final punctuation",
    "你好。 我很好！\n谢谢？好的",
    "Dr. Smith arrived at 5 p.m. on Monday. He left.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_pieces_concatenate_back_to_the_text(text: str) -> None:
    for pieces in (split_sentences(text, "en"), split_sentences(text, "zh"), split_lines(text)):
        assert pieces.text() == text
        assert all(s == s.strip() for s in pieces.sentences)


def test_fifty_sentences_in_one_line_come_back_as_fifty_in_one_line() -> None:
    sentences = [f"Sentence number {i} is here." for i in range(50)]
    pieces = split_sentences(" ".join(sentences), "en")
    assert pieces.sentences == sentences
    joined = pieces.join([f"Satz {i}." for i in range(50)])
    assert joined == " ".join(f"Satz {i}." for i in range(50))


def test_spacing_and_line_breaks_stay_around_the_translations() -> None:
    text = "  A man sleeps.   A dog barks!\r\n\r\nThe end.\n"
    pieces = split_sentences(text, "en")
    assert pieces.sentences == ["A man sleeps.", "A dog barks!", "The end."]
    assert pieces.join(["X.", "Y!", "Z."]) == "  X.   Y!\r\n\r\nZ.\n"
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        pieces.join(["X.", "Y."])


def test_chinese_sentence_ends_split_without_spaces() -> None:
    pieces = split_sentences("您有日本啤酒吗？别犯傻。我做不到！", "zh")
    assert pieces.sentences == ["您有日本啤酒吗？", "别犯傻。", "我做不到！"]
    assert pieces.join(["A?", "B.", "C!"]) == "A?B.C!"


def test_lines_mode_keeps_each_line_whole() -> None:
    assert split_lines("One. Two.\nThree.").sentences == ["One. Two.", "Three."]


@pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason="needs ../shared/data")
def test_paragraphs_of_test_sentences_split_back_into_them() -> None:
    """Paragraphs of 2-6 consecutive Multi30k test sentences (German and English): at least 85%
    come back as exactly their sentences (the rest hold a sentence without a final stop)."""
    for lang in ("en", "de"):
        with gzip.open(DATA / "multi30k" / f"test_2016_flickr.{lang}.gz", "rt") as f:
            sentences = [line.strip() for line in f if line.strip()]
        rng = random.Random(0)
        exact = 0
        for _ in range(200):
            k = rng.randint(2, 6)
            i = rng.randrange(len(sentences) - k)
            exact += split_sentences(" ".join(sentences[i : i + k]), lang).sentences == sentences[i : i + k]
        assert exact >= 170, (lang, exact)
