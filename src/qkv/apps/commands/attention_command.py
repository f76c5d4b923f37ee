"""`qkv attention`: translate, then write every attention map (attention.json and PNGs)."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from ._flags import (
    SEARCH,
    TRANSLATOR_FLAGS,
    add_decoding_arguments,
    add_flag,
    add_flags,
    decode_options,
    runtime_options,
)
from ._io import error_line, read_lines
from ._translating import load_translator

HELP = "translate and write every attention map: attention.json and PNG heatmaps"
DESCRIPTION = (
    "Translate each sentence, then write the attention weights of every layer and head (encoder "
    "self-attention, decoder self-attention, cross-attention) to OUT/attention.json and draw them "
    "as PNG heatmaps with the tokens as labels. With several sentences, attention.json holds a "
    "list and each sentence's PNGs lie in OUT/N/. The format: `qkv.apps.attention_maps`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sentences", nargs="*", help="source sentences (or --input FILE)")
    add_flags(parser, "--model")
    add_flag(parser, "--input", help="UTF-8 text file (.gz allowed), one sentence per line")
    parser.add_argument(
        "--out", required=True, help="folder for attention.json and the PNGs (new or empty)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty --out, replacing the attention.json and PNGs of an earlier "
        "qkv attention there (other files stay)",
    )
    add_decoding_arguments(parser, SEARCH)
    add_flags(parser, *TRANSLATOR_FLAGS, "--workers")


def run(args: argparse.Namespace) -> int:
    from ..attention_maps import check_out, write_attention

    options = decode_options(args)
    if len(args.model) > 1:
        raise ValueError("attention weights come from one model; give --model once")
    if bool(args.sentences) == bool(args.input):
        raise ValueError('give the sentences as arguments ("a source sentence") or --input FILE')
    check_out(Path(args.out), args.overwrite)  # before the model loads
    runtime = runtime_options(args)
    texts = args.sentences or read_lines(args.input)
    translator = load_translator(args.model, runtime)
    with warnings.catch_warnings(record=True) as caught:  # each warning once, on one line
        warnings.simplefilter("always")
        paths = write_attention(
            translator,
            texts,
            args.out,
            options,
            overwrite=args.overwrite,
        )
    shown = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    for message in dict.fromkeys(shown):
        error_line(f"qkv attention: warning: {message}")
    n_png = sum(p.suffix == ".png" for p in paths)
    print(f"wrote {paths[0]} and {n_png} heatmaps to {args.out}")
    return 0
