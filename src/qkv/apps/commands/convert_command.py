"""`qkv convert FORMAT`: import a model of another toolkit as a model directory; the formats are
`qkv.interop.IMPORTERS`."""

from __future__ import annotations

import argparse

from ...interop import IMPORTERS
from ._flags import formats_help

HELP = "import a model of another toolkit as a model directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=sorted(IMPORTERS), help=formats_help(IMPORTERS))
    parser.add_argument(
        "src_dir",
        help="a directory (config.json, weights, source.spm, target.spm, vocab.json), or a "
        "Hugging Face Hub name such as Helsinki-NLP/opus-mt-en-de",
    )
    parser.add_argument("--revision", help="a Hub name's branch, tag or commit (default: main)")
    parser.add_argument("--out", required=True, help="the new qkv model directory")


def run(args: argparse.Namespace) -> int:
    source = args.src_dir if args.revision is None else f"{args.src_dir}@{args.revision}"
    out = IMPORTERS[args.format](source, args.out)
    print(f"imported {args.src_dir} into {out}  (try: echo 'Hello.' | qkv translate --model {out})")
    return 0
