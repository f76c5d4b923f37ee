"""`qkv evaluate`: translate test sets and score them (sacreBLEU BLEU, chrF, tokenized BLEU).

One test set prints sacreBLEU's lines; several (--src/--ref given again, --split given again, or
files and a corpus together) print one table, a row per test set, so that a model's score on its
domain and on general text (before and after fine-tuning) read side by side. The files are read a
chunk at a time and scored a block at a time (`evaluate.CorpusScorer`), so that a test set of
millions of lines runs in bounded memory.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

from ...decode.options import DecodeOptions
from ..translator import Translator
from ._flags import (
    SEARCH,
    TRANSLATOR_FLAGS,
    add_decoding_arguments,
    add_flags,
    decode_options,
    restart_on_cpu,
    runtime_options,
)
from ._io import Output, check_output_path, count_lines, file_lines
from ._translating import load_translator, translate_lines

if TYPE_CHECKING:
    from ..evaluate import Scores

HELP = "translate test sets and print sacreBLEU BLEU, chrF (+ tokenized BLEU)"
DESCRIPTION = (
    "Translate --src (or a named corpus split) and score against the references: sacreBLEU BLEU "
    "and chrF with their signatures, and tokenized lowercase BLEU when tokenized references are "
    "given or known (Multi30k). Several test sets (--src/--ref again, --split again, or files and "
    "--corpus together) print one table, a row per test set."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, "--model")
    parser.add_argument(
        "--src",
        action="append",
        help="source file, one sentence per line; again for each further test set",
    )
    parser.add_argument(
        "--ref",
        action="append",
        help="reference file, line-aligned with --src (the Nth --ref goes with the Nth --src)",
    )
    parser.add_argument(
        "--tok-ref",
        help="lowercased Moses-tokenized references (e.g. test_2016_flickr.lc.norm.tok.de)",
    )
    parser.add_argument("--corpus", help="a named corpus instead of files: multi30k, tatoeba-zh-en")
    parser.add_argument(
        "--split",
        action="append",
        help="split of --corpus (default: its test split); again for each further split",
    )
    parser.add_argument("--pair", help="languages SRC-TGT, e.g. en-de (needed with --corpus)")
    parser.add_argument(
        "--data-dir",
        help="folder holding the named corpora (default: $QKV_DATA_DIR, else the cache)",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="fetch a missing --corpus split (checked by sha256) into --data-dir",
    )
    parser.add_argument(
        "--lang", help="target language for BLEU tokenization (default: the target of --pair)"
    )
    parser.add_argument(
        "--output",
        help="also write the translations to this file, as they are done (checked before "
        "decoding; one test set)",
    )
    add_decoding_arguments(parser, SEARCH)
    add_flags(parser, *TRANSLATOR_FLAGS, "--workers")


@dataclass
class Files:
    """A test set's files: sources, references, and lowercased tokenized references (or
    None); lang: the target language ("" when unknown); name: its row in a table."""

    name: str
    src: str
    ref: str
    tok_ref: str | None
    lang: str


def run(args: argparse.Namespace) -> int:
    from ..evaluate import format_table

    options = decode_options(args)
    runtime = runtime_options(args)
    tests = _test_sets(args)
    totals = [_count_test_set(test) for test in tests]  # every file checked before the model loads
    if args.output:
        if len(tests) > 1:
            raise ValueError(f"--output takes one test set, not {len(tests)}")
        check_output_path(args.output, [tests[0].src, tests[0].ref, tests[0].tok_ref])
    restart_on_cpu(args, runtime.device)  # after the checks
    translator = load_translator(args.model, runtime)
    pairs = zip(tests, totals, strict=True)
    rows = [_score(args, translator, test, total, options) for test, total in pairs]
    if len(rows) == 1:
        print(rows[0][2].format())
    else:
        print(format_table(rows))
    return 0


def _score(
    args: argparse.Namespace,
    translator: Translator,
    test: Files,
    total: int,
    options: DecodeOptions,
) -> tuple[str, int, Scores]:
    """The test set (of `total` lines) translated (into --output, if given) and scored as it is
    read: (name, sentences, scores)."""
    from ..evaluate import CorpusScorer

    # a model that writes lowercase is scored case-insensitively
    scorer = CorpusScorer(test.lang, test.tok_ref is not None, translator.tokenizer.lowercase)
    refs = file_lines(test.ref, "--ref")
    tok_refs = repeat(None) if test.tok_ref is None else file_lines(test.tok_ref, "--tok-ref")
    output = Output(args.output) if args.output else None
    try:
        translate_lines(
            args,
            translator,
            file_lines(test.src, "--src"),
            options,
            output,
            total=total,
            each=lambda t: scorer.add(t.text, next(refs), next(tok_refs)),
        )
    finally:
        if output is not None:
            output.close()
    return test.name, total, scorer.scores()


def _languages(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The source and target languages of --pair (None, None without it)."""
    if not args.pair:
        return None, None
    src_lang, _, tgt_lang = args.pair.partition("-")
    if not src_lang or not tgt_lang:
        raise ValueError(f"--pair must look like en-de, got {args.pair!r}")
    return src_lang, tgt_lang


def _test_sets(args: argparse.Namespace) -> list[Files]:
    """The test sets of --src and --ref (paired in order), then those of --corpus (a split each,
    fetched with --download); --tok-ref goes to the one test set there is."""
    src_lang, tgt_lang = _languages(args)
    sources, refs = args.src or [], args.ref or []
    if len(sources) != len(refs):
        raise ValueError(f"give one --ref for each --src: {len(sources)} --src, {len(refs)} --ref")
    lang = args.lang or tgt_lang or ""
    tests = [Files(src, src, ref, None, lang) for src, ref in zip(sources, refs, strict=True)]
    if args.corpus:
        if src_lang is None or tgt_lang is None:
            raise ValueError("--corpus needs --pair SRC-TGT (e.g. en-de)")
        tests += _corpus_sets(args, src_lang, tgt_lang, lang, find_tok_ref=not args.tok_ref)
    if not tests:
        raise ValueError(
            "give --src FILE --ref FILE, or --corpus NAME --pair SRC-TGT [--split SPLIT]"
        )
    if args.tok_ref is not None:
        if len(tests) > 1:
            raise ValueError(f"--tok-ref goes with one test set, not {len(tests)}")
        tests[0].tok_ref = args.tok_ref
    if any(test.tok_ref is not None for test in tests) and not lang:
        raise ValueError(
            "tokenized lowercase BLEU needs the target language: give --lang (or --pair)"
        )
    return tests


def _corpus_sets(
    args: argparse.Namespace, src_lang: str, tgt_lang: str, lang: str, find_tok_ref: bool
) -> list[Files]:
    """A test set per --split of --corpus (its test split by default), with the tokenized
    references the corpus has for it when `find_tok_ref`."""
    from ...data.corpus import DataError
    from ...data.named import get_corpus, named_paths, tokenized_reference_path

    corpus = get_corpus(args.corpus)
    tests = []
    for split in args.split or [corpus.splits[-1]]:
        src, ref = named_paths(args.corpus, split, src_lang, tgt_lang, args.data_dir, args.download)
        tok_ref = None
        if find_tok_ref and split in corpus.tok_splits:
            try:
                tok_ref = tokenized_reference_path(
                    args.corpus, split, tgt_lang, args.data_dir, args.download
                )
            except DataError as e:
                logging.getLogger("qkv").warning(f"no tokenized lowercase BLEU: {e}")
        tests.append(Files(f"{args.corpus} {split}", str(src), str(ref), tok_ref, lang))
    return tests


def _count_test_set(test: Files) -> int:
    """How many lines the sources, references and tokenized references (if any) have: the same
    number, not zero (each file read once, a line at a time, and checked)."""
    n_src, n_ref = count_lines(test.src, "--src"), count_lines(test.ref, "--ref")
    n_tok = None if test.tok_ref is None else count_lines(test.tok_ref, "--tok-ref")
    if n_src != n_ref or (n_tok is not None and n_tok != n_ref):
        counts = f"{test.src} has {n_src} lines, {test.ref} {n_ref}"
        if n_tok is not None:
            counts += f", {test.tok_ref} {n_tok}"
        raise ValueError(counts)
    if not n_src:
        raise ValueError(f"{test.src} and {test.ref} are empty: no sentences to evaluate")
    return n_src
