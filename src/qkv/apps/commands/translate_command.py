"""`qkv translate`: lines of stdin or --input translated to stdout, one line per line, read a chunk
at a time (`Translator.translate_stream`), so that a file of millions of lines runs in the memory of
one chunk; an HTML document (--format html) is read whole."""

from __future__ import annotations

import argparse

from ..trace import format_trace, trace_translation
from ._flags import (
    ALL,
    TRANSLATOR_FLAGS,
    add_decoding_arguments,
    add_flags,
    decode_options,
    read_glossary,
    restart_on_cpu,
    runtime_options,
)
from ._io import Output, count_lines, input_lines
from ._translating import load_translator, translate_html, translate_lines, translate_paragraphs

# a file of this many lines restarts the command with tcmalloc on the CPU: the restart costs ~1 s,
# which the faster steps repay after ~800 lines (docs/benchmarks.md, "The allocator for decoding")
RESTART_LINES = 1000

HELP = "translate lines from stdin or --input to stdout, one line per line"
DESCRIPTION = (
    "Translate text: one output line per input line (an empty line gives an empty line), written "
    "in input order as soon as it and the lines before it are done; the input is read a chunk "
    "at a time, so that memory does not grow with it. A byte order mark at the "
    "start of the input is dropped. Beam search by default; --sample draws tokens instead."
)
NBEST_HELP = (
    "with N > 1, write the N best as 'line ||| translation ||| score' (Moses n-best format)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, "--model", "--input")
    add_decoding_arguments(parser, ALL, helps={"nbest": NBEST_HELP})
    parser.add_argument(
        "--alignment",
        action="store_true",
        help="after a tab, the hard word alignment of each translation from the last layer's "
        "cross-attention: 'src-tgt' pairs of 0-based whitespace words (fast_align / Marian)",
    )
    parser.add_argument(
        "--split",
        choices=["lines", "sentences"],
        default="lines",
        help="sentences: cut each line into its sentences, translate each, and write the line "
        "again with its own spacing (default: each line is one sentence)",
    )
    parser.add_argument(
        "--format",
        choices=["text", "html"],
        default="text",
        help="html: the input is one HTML document, written back with its text translated and "
        "its markup kept",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="show the search of each line step by step instead: the candidates ranked, what "
        "ends (with its length-penalised score), the beam kept (--beam 1: greedy)",
    )
    add_flags(parser, "--glossary", *TRANSLATOR_FLAGS, "--workers")


def run(args: argparse.Namespace) -> int:
    options = decode_options(args)
    if args.alignment and options.nbest > 1:
        raise ValueError("--alignment writes the best translation's alignment; use --nbest 1")
    whole = args.split == "sentences" or args.format == "html" or args.trace
    if whole and (args.alignment or options.nbest > 1):
        raise ValueError("--alignment and --nbest take one sentence per line: use --split lines")
    if args.trace and (args.split != "lines" or args.format != "text" or not options.beam_search):
        raise ValueError("--trace shows the search of each line: no --split, --format or --sample")
    if args.trace and args.glossary:
        raise ValueError("--trace shows beam search without a glossary: leave out --glossary")
    runtime = runtime_options(args)  # a bad device, before the input is read
    glossary = read_glossary(args)
    total = None  # a file is counted (and checked) first, stdin is not
    if args.input is not None:
        total = count_lines(args.input)
        if total >= RESTART_LINES:  # a file, read again after the restart
            restart_on_cpu(args, runtime.device)
    lines = input_lines(args.input)  # read as the translator asks for them
    output = Output()
    translator = load_translator(args.model, runtime)
    if args.trace:
        for line in lines:
            steps = trace_translation(translator, line, options)
            output.write([f"source: {line}", *format_trace(steps, translator, options).split("\n")])
    elif args.format == "html":
        translate_html(translator, lines, options, output, glossary)
    elif args.split == "sentences":
        translate_paragraphs(translator, lines, options, output, glossary)
    else:
        translate_lines(args, translator, lines, options, output, glossary, total=total)
    return 0
