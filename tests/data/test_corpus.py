"""Reading, aligning and cleaning parallel text, and the error messages users see when their data is bad."""

import codecs
import gzip
from pathlib import Path

import pytest

from qkv.data.corpus import (
    CleanReport,
    DataError,
    ParallelCorpus,
    clean,
    load_parallel,
    load_tsv,
    read_lines,
)


def write(path: Path, data: bytes) -> Path:
    """Write raw bytes, gzip-compressed when the name ends in .gz."""
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("name", ["plain.txt", "packed.gz"])
def test_read_lines_strips_only_the_line_terminator(tmp_path, name):
    data = "  two spaces\r\ntab\t\n\nlast line without newline \u2028 still one line".encode()
    assert read_lines(write(tmp_path / name, data)) == [
        "  two spaces",
        "tab\t",
        "",
        "last line without newline \u2028 still one line",
    ]


def test_read_lines_of_an_empty_file(tmp_path):
    assert read_lines(write(tmp_path / "empty.txt", b"")) == []


BAD_INPUTS = [
    # (file name, bytes on disk or None for no file, expected message with {path} for the file)
    ("bad.txt", b"ok\nok\n\xff broken\n", "{path}:3: invalid UTF-8"),
    ("bad.gz", gzip.compress(b"ok\n\xc3\x28\n", mtime=0), "{path}:2: invalid UTF-8"),
    ("notgzip.gz", b"plain text, not gzip\n", "{path}: not a valid gzip file"),
    ("truncated.gz", gzip.compress(b"many words " * 100, mtime=0)[:-10], "{path}: not a valid gzip file"),
    ("missing.txt", None, "file not found: {path}"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_INPUTS)
def test_read_lines_errors_name_the_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError) as error:
        read_lines(path)
    assert str(error.value).startswith(message.format(path=path))


def test_load_parallel(tmp_path):
    src = write(tmp_path / "train.de.gz", "Grüß Gott\nDanke\n".encode())
    tgt = write(tmp_path / "train.en", b"Hello world\nThanks\n")
    corpus = load_parallel(src, tgt)
    assert corpus == ParallelCorpus(["Grüß Gott", "Danke"], ["Hello world", "Thanks"])
    assert len(corpus) == 2


def test_load_parallel_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.de", b"a\nb\nc\n")
    tgt = write(tmp_path / "train.en", b"a\nb\n")
    with pytest.raises(DataError) as error:
        load_parallel(src, tgt)
    assert str(error.value) == f"{src} has 3 lines but {tgt} has 2"


def test_parallel_corpus_rejects_unequal_sides():
    with pytest.raises(DataError, match="source has 2 sentences but target has 1"):
        ParallelCorpus(["a", "b"], ["a"])


def test_load_tsv(tmp_path):
    path = write(tmp_path / "pairs.tsv", "我们走吧。\tLet's go.\n你好\tHello\n".encode())
    assert load_tsv(path) == ParallelCorpus(["我们走吧。", "你好"], ["Let's go.", "Hello"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a\tb\nno tab here\n", "{path}:2: expected source<TAB>target, found 0 tabs"),
        (b"a\tb\tc\n", "{path}:1: expected source<TAB>target, found 2 tabs"),
    ],
)
def test_load_tsv_rejects_lines_without_exactly_one_tab(tmp_path, content, message):
    path = write(tmp_path / "pairs.tsv", content)
    with pytest.raises(DataError) as error:
        load_tsv(path)
    assert str(error.value) == message.format(path=path)


CORPUS = ParallelCorpus(
    src=["ok", "", "a fine pair", "   ", "x" * 30, "short", "two words"],
    tgt=["ok", "nonempty", "a fine pair too", "nonempty", "long one", "y" * 40, "\t"],
)

CLEAN_CASES = [
    # (max_len, max_ratio, kept sources, report)
    (None, None, ["ok", "a fine pair", "x" * 30, "short"], CleanReport(kept=4, empty=3, too_long=0, ratio=0)),
    (20, None, ["ok", "a fine pair"], CleanReport(kept=2, empty=3, too_long=2, ratio=0)),
    (None, 3.0, ["ok", "a fine pair"], CleanReport(kept=2, empty=3, too_long=0, ratio=2)),
    (35, 3.0, ["ok", "a fine pair"], CleanReport(kept=2, empty=3, too_long=1, ratio=1)),
]


@pytest.mark.parametrize(("max_len", "max_ratio", "kept", "report"), CLEAN_CASES)
def test_clean_drops_and_counts(max_len, max_ratio, kept, report):
    before = ParallelCorpus(list(CORPUS.src), list(CORPUS.tgt))
    cleaned, got = clean(CORPUS, max_len=max_len, max_ratio=max_ratio)
    assert cleaned.src == kept
    assert cleaned.tgt == [CORPUS.tgt[CORPUS.src.index(s)] for s in kept]
    assert got == report
    assert before == CORPUS, "clean must not modify its input"


def test_clean_measures_with_the_given_length():
    corpus = ParallelCorpus(["one two three", "one"], ["un deux trois", "un deux trois quatre"])
    cleaned, report = clean(corpus, max_len=3, length=lambda text: len(text.split()))
    assert cleaned.src == ["one two three"]
    assert report == CleanReport(kept=1, empty=0, too_long=1, ratio=0)


def test_clean_report_summary():
    report = CleanReport(kept=90, empty=4, too_long=5, ratio=1)
    assert str(report) == "kept 90 of 100 pairs (dropped 4 empty, 5 too long, 1 over the length ratio)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_len": 0}, "max_len must be at least 1, got 0"),
        ({"max_ratio": 0.5}, "max_ratio must be at least 1, got 0.5"),
    ],
)
def test_clean_rejects_bad_limits(kwargs, message):
    with pytest.raises(DataError, match=message):
        clean(CORPUS, **kwargs)


def test_read_lines_drops_a_byte_order_mark_at_the_start_only(tmp_path):
    """A UTF-8 BOM (as Windows editors write it) is not part of the first
    sentence; the same character later in the file is text and stays."""
    path = tmp_path / "bom.txt"
    path.write_bytes(codecs.BOM_UTF8 + "Ein Hund.\n\ufeffzwei\n".encode())
    assert read_lines(path) == ["Ein Hund.", "\ufeffzwei"]
    gz = tmp_path / "bom.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert read_lines(gz) == ["Ein Hund.", "\ufeffzwei"]
