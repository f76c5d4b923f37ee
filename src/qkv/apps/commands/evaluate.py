"""`qkv evaluate`: translate a test set and score it (sacreBLEU BLEU, chrF, tokenized BLEU)."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from ._flags import (
    SEARCH,
    TRANSLATOR_FLAGS,
    add_decoding_arguments,
    add_flags,
    decode_options,
    restart_on_cpu,
    runtime_options,
)
from ._io import Output, check_output_path, read_lines
from ._translating import load_translator, translate_lines

HELP = "translate a test set and print sacreBLEU BLEU, chrF (+ tokenized BLEU)"
DESCRIPTION = (
    "Translate --src (or a named corpus split) and score against the references: sacreBLEU BLEU "
    "and chrF with their signatures, and tokenized lowercase BLEU when tokenized references are "
    "given or known (Multi30k)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, "--model")
    parser.add_argument("--src", help="source file, one sentence per line")
    parser.add_argument("--ref", help="reference file, line-aligned with --src")
    parser.add_argument(
        "--tok-ref",
        help="lowercased Moses-tokenized references (e.g. test_2016_flickr.lc.norm.tok.de)",
    )
    parser.add_argument("--corpus", help="a named corpus instead of files: multi30k, tatoeba-zh-en")
    parser.add_argument("--split", help="split of --corpus (default: its test split)")
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
        help="also write the translations to this file, as they are done (checked before decoding)",
    )
    add_decoding_arguments(parser, SEARCH)
    add_flags(parser, *TRANSLATOR_FLAGS, "--workers")


@dataclass
class Files:
    """A test set's files: sources, references, and lowercased tokenized references (or
    None); lang: the target language ("" when unknown)."""

    src: str
    ref: str
    tok_ref: str | None
    lang: str


def run(args: argparse.Namespace) -> int:
    from ..evaluate import score

    options = decode_options(args)
    runtime = runtime_options(args)
    test = _test_set(args)
    sources, refs, tok_refs = _read_test_set(test)
    if args.output:
        check_output_path(args.output, [test.src, test.ref, test.tok_ref])
    restart_on_cpu(args, runtime.device)  # after the checks
    translator = load_translator(args.model, runtime)
    output = Output(args.output) if args.output else None
    try:
        results = translate_lines(args, translator, sources, options, output)
    finally:
        if output is not None:
            output.close()
    hyps = [r.text for r in results]
    # a model that writes lowercase is scored case-insensitively
    lowercase = translator.tokenizer.lowercase
    print(score(hyps, refs, test.lang, tok_refs, lowercase=lowercase).format())
    return 0


def _test_set(args: argparse.Namespace) -> Files:
    """The files of --src and --ref, or of --corpus (fetched with --download), and --tok-ref."""
    from ...data.corpus import DataError
    from ...data.named import get_corpus, named_paths, tokenized_reference_path

    src_lang = tgt_lang = None
    if args.pair:
        src_lang, _, tgt_lang = args.pair.partition("-")
        if not src_lang or not tgt_lang:
            raise ValueError(f"--pair must look like en-de, got {args.pair!r}")
    tok_ref = args.tok_ref
    if args.corpus:
        if args.src or args.ref or src_lang is None or tgt_lang is None:
            raise ValueError("--corpus needs --pair SRC-TGT (e.g. en-de) and no --src/--ref")
        split = args.split or get_corpus(args.corpus).splits[-1]
        src, ref = named_paths(args.corpus, split, src_lang, tgt_lang, args.data_dir, args.download)
        if tok_ref is None and split in get_corpus(args.corpus).tok_splits:
            try:
                tok_ref = tokenized_reference_path(
                    args.corpus, split, tgt_lang, args.data_dir, args.download
                )
            except DataError as e:
                logging.getLogger("qkv").warning(f"no tokenized lowercase BLEU: {e}")
    elif args.src and args.ref:
        src, ref = args.src, args.ref
    else:
        raise ValueError(
            "give --src FILE --ref FILE, or --corpus NAME --pair SRC-TGT [--split SPLIT]"
        )
    lang = args.lang or tgt_lang
    if tok_ref is not None and not lang:
        raise ValueError(
            "tokenized lowercase BLEU needs the target language: give --lang (or --pair)"
        )
    return Files(src, ref, tok_ref, lang or "")


def _read_test_set(test: Files) -> tuple[list[str], list[str], list[str] | None]:
    """The sources, references and tokenized references (or None), line-aligned and not empty."""
    sources = read_lines(test.src, "--src")
    refs = read_lines(test.ref, "--ref")
    tok_refs = None if test.tok_ref is None else read_lines(test.tok_ref, "--tok-ref")
    if len(sources) != len(refs) or (tok_refs is not None and len(tok_refs) != len(refs)):
        counts = f"{test.src} has {len(sources)} lines, {test.ref} {len(refs)}"
        if tok_refs is not None:
            counts += f", {test.tok_ref} {len(tok_refs)}"
        raise ValueError(counts)
    if not sources:
        raise ValueError(f"{test.src} and {test.ref} are empty: no sentences to evaluate")
    return sources, refs, tok_refs
