"""Monolingual text and labelled text: the data of language models and classifiers.

    lines = load_text("captions.en")            # one text per line, blank lines dropped
    data = load_labeled("reviews.tsv")          # text<TAB>label per line

Both read UTF-8 files (plain or .gz) with `qkv.data.corpus.read_lines`; a problem is a DataError
that names the file and, where it applies, the line.
"""

from __future__ import annotations

from dataclasses import dataclass

from .corpus import DataError, StrPath, read_lines


def load_text(path: StrPath) -> list[str]:
    """The non-blank lines of a text file, in order (blank and whitespace-only lines dropped)."""
    return [line for line in read_lines(path) if line.strip()]


@dataclass
class LabeledText:
    """Texts and their labels: `labels[i]` is the class of `texts[i]`."""

    texts: list[str]
    labels: list[str]

    def __len__(self) -> int:
        return len(self.texts)


def load_labeled(path: StrPath) -> LabeledText:
    """Read `text<TAB>label` lines; the label is what follows the last tab. Blank lines are
    skipped; a line without a tab, or with an empty text or label, is a DataError naming it."""
    texts, labels = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        text, tab, label = line.rpartition("\t")
        if not tab:
            raise DataError(f"{path}:{number}: expected text<TAB>label, found no tab")
        if not text.strip() or not label.strip():
            what = "text" if not text.strip() else "label"
            raise DataError(f"{path}:{number}: the {what} is empty (expected text<TAB>label)")
        texts.append(text)
        labels.append(label.strip())
    return LabeledText(texts, labels)
