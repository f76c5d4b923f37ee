"""Big inputs stream: `qkv translate` and `qkv evaluate` read a chunk of lines at a time and write
(or score) them in input order, so that memory holds a chunk, not the file. Chunks are made tiny
here (one batch of 8 tokens, blocks of 2 lines) so that a few dozen lines make many of them; the
oracle is the translator given the whole list at once."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from qkv.apps import translator as translator_module
from qkv.apps.cli import main
from qkv.apps.commands import evaluate_command, translate_command
from qkv.apps.commands._io import Output
from qkv.apps.evaluate import CorpusScorer, bleu, chrf, tokenize_lowercase, tokenized_bleu
from qkv.apps.translator import Translator
from qkv.decode.options import DecodeOptions
from sentences import EN, ZH  # tests/sentences.py

FAST = ["--beam", "2", "--max-len-a", "0.5", "--max-len-b", "4"]  # short outputs keep the tests fast
FAST_OPTIONS = DecodeOptions(beam=2, max_len_a=0.5, max_len_b=4)
LINES = [*EN, "", *ZH, "   ", *(f"{a} {b}" for a, b in zip(EN, ZH, strict=False))]


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of one batch (--batch-tokens 8: a line or two each), read 2 lines at a time."""
    monkeypatch.setattr(translator_module, "CHUNK_BATCHES", 1)
    monkeypatch.setattr(translator_module, "BLOCK_LINES", 2)


@pytest.fixture
def reading(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """At each write of the output, how many more input lines had been read than written."""
    read, ahead = [0], []
    for module in (translate_command, evaluate_command):
        name = "input_lines" if module is translate_command else "file_lines"
        given = getattr(module, name)

        def counted(*args: str, given=given) -> Iterator[str]:
            source = args[1:] in ((), ("--src",))  # not the references evaluate reads beside
            for line in given(*args):
                read[0] += source
                yield line

        monkeypatch.setattr(module, name, counted)
    write = Output.write
    written = [0]

    def watched(self: Output, lines: list[str]) -> None:
        written[0] += 1
        ahead.append(read[0] - written[0])
        write(self, lines)

    monkeypatch.setattr(Output, "write", watched)
    return ahead


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_file_is_translated_a_chunk_at_a_time_in_input_order(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_chunks: None,
    reading: list[int], workers: str,
) -> None:
    """--input FILE: the lines of translating the whole list at once, in input order, with many
    chunks (worker processes too); at every write, the lines read but not yet written are a few
    chunks' worth, not the file."""
    source = write_lines(tmp_path / "in.txt", LINES)
    args = ["translate", "--model", str(model_dir), "--input", source, *FAST, "--batch-tokens", "8"]
    assert main([*args, "--workers", workers]) == 0
    expected = Translator.load(model_dir).translate(LINES, FAST_OPTIONS)
    assert capsys.readouterr().out.splitlines() == expected
    assert len(reading) == len(LINES)
    assert max(reading) <= 6 < len(LINES)  # a chunk of a line or two, a block of 2 lines ahead


def test_stdin_nbest_alignment_and_sentences_stream_too(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], tiny_chunks: None, reading: list[int],
) -> None:
    """stdin, --nbest, --alignment and --split sentences read a chunk at a time as well, and write
    what the whole input at once writes."""
    import io

    def run(*flags: str) -> list[str]:
        data = ("\n".join(LINES) + "\n").encode("utf-8")
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        reading.clear()
        assert main(["translate", "--model", str(model_dir), *FAST, "--batch-tokens", "8", *flags]) == 0
        assert reading and max(reading) <= 6
        return capsys.readouterr().out.splitlines()

    whole = Translator.load(model_dir)
    nbest = whole.translate_detailed(LINES, FAST_OPTIONS.replace(nbest=2))
    assert run("--nbest", "2") == [f"{i} ||| {text} ||| {score:.4f}" for i, t in enumerate(nbest)
                                    for text, score in t.nbest]
    aligned = run("--alignment")
    assert [line.split("\t")[0] for line in aligned] == [t.text for t in nbest]
    paragraphs = [f"{EN[0]} {EN[1]}", "", f"{EN[2]}  {EN[3]} {EN[4]}", "   ", EN[5]]
    source = write_lines(tmp_path / "paragraphs.txt", paragraphs * 3)
    reading.clear()
    args = ["translate", "--model", str(model_dir), "--input", source, *FAST, "--batch-tokens", "8"]
    assert main([*args, "--split", "sentences"]) == 0
    streamed = capsys.readouterr().out.splitlines()
    assert max(reading) <= 6
    monkeypatch.setattr(translator_module, "CHUNK_BATCHES", 10**6)  # one chunk: the whole input
    monkeypatch.setattr(translator_module, "BLOCK_LINES", 10**6)
    assert main([*args, "--split", "sentences"]) == 0
    assert streamed == capsys.readouterr().out.splitlines() and len(streamed) == 15


def test_evaluate_streams_and_scores_as_sacrebleu_does_on_the_whole_set(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_chunks: None,
    reading: list[int],
) -> None:
    """`qkv evaluate` in many chunks: the hypotheses written, in order, and scores equal to
    sacreBLEU's corpus_score over all of them at once."""
    sources = [line for line in LINES if line.strip()]
    refs = [EN[(i * 7) % len(EN)] for i in range(len(sources))]
    src, ref = write_lines(tmp_path / "src", sources), write_lines(tmp_path / "ref", refs)
    hyp = tmp_path / "hyp"
    args = ["evaluate", "--model", str(model_dir), "--src", src, "--ref", ref, "--output", str(hyp)]
    assert main([*args, *FAST, "--batch-tokens", "8"]) == 0
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    assert hyps == Translator.load(model_dir).translate(sources, FAST_OPTIONS)
    assert len(reading) == len(sources) and max(reading) <= 6
    out = capsys.readouterr().out
    assert f"= {bleu(hyps, refs)[0].score:.2f}" in out and f"= {chrf(hyps, refs)[0].score:.2f}" in out


def test_the_scorer_in_blocks_gives_corpus_scores_exactly() -> None:
    """`CorpusScorer` adding sentence statistics a block at a time equals sacreBLEU's corpus_score
    on the whole set (BLEU, chrF, tokenized BLEU; cased and lowercased), to the last digit."""
    hyps = [s.lower() if i % 3 else s for i, s in enumerate(EN)] + ["", "a dog .", "x"]
    refs = [EN[(i + 1) % len(EN)] if i % 4 == 0 else EN[i % len(EN)] for i in range(len(hyps))]
    tok_refs = [tokenize_lowercase(r, "en") for r in refs]
    for lowercase in (False, True):
        for block in (1, 2, 5, 1000):
            scorer = CorpusScorer("en", tokenized=True, lowercase=lowercase, block=block)
            for hyp, ref, tok_ref in zip(hyps, refs, tok_refs, strict=True):
                scorer.add(hyp, ref, tok_ref)
            got = scorer.scores()
            want_bleu, bleu_sig = bleu(hyps, refs, "en", lowercase=lowercase)
            want_chrf, chrf_sig = chrf(hyps, refs, lowercase=lowercase)
            want_tok = tokenized_bleu(hyps, tok_refs, "en")[0]
            assert 0 < got.bleu.score < 100 and 0 < got.chrf.score < 100
            assert (got.bleu.score, got.chrf.score, got.tok_bleu.score) == (
                want_bleu.score, want_chrf.score, want_tok.score)
            assert str(got.bleu) == str(want_bleu) and str(got.chrf) == str(want_chrf)
            assert got.signatures["bleu"] == bleu_sig and got.signatures["chrf"] == chrf_sig
    with pytest.raises(ValueError, match="no sentences to score"):
        CorpusScorer("en").scores()
    with pytest.raises(ValueError, match="tokenized reference"):
        CorpusScorer("en").add("a", "a", "a")


def test_chunks_of_a_stream_do_not_depend_on_the_blocks_it_is_read_in() -> None:
    """`data.batching.chunks` cuts the runs a reading of the whole list at once cuts (at most
    chunk_tokens tokens, eos counted, empty lines free, a long line alone), whatever the block
    size, and reads no more than one block beyond the run it gives."""
    from qkv.data.batching import chunks

    texts = ["a b c", "", "a", "a b c d e f g h", "b", "", "", "c d", "e"]
    encode = lambda block: [t.split() for t in block]  # noqa: E731
    expected = [["a b c", "", "a"], ["a b c d e f g h"], ["b", "", "", "c d"], ["e"]]
    for block in (1, 2, 4, 100):
        read: list[str] = []

        def source(read: list[str] = read) -> Iterator[str]:
            for text in texts:
                read.append(text)
                yield text

        runs = []
        for run_texts, run_ids in chunks(source(), encode, 6, block):
            assert run_ids == [t.split() for t in run_texts]
            assert len(read) - sum(map(len, runs)) - len(run_texts) <= block
            runs.append(run_texts)
        assert runs == expected
    assert list(chunks(iter([]), encode, 6, 2)) == []
