"""`qkv export FORMAT`: write a model directory in another toolkit's format; the formats are
`qkv.interop.EXPORTERS`."""

from __future__ import annotations

import argparse

from ...interop import EXPORTERS, QUANTIZATIONS
from ._flags import formats_help

HELP = "write a model directory in another toolkit's format"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=sorted(EXPORTERS), help=formats_help(EXPORTERS))
    parser.add_argument("model_dir", help="a qkv model directory (an encoder-decoder Transformer)")
    parser.add_argument("--out", required=True, help="the new directory, in the format's layout")
    types = "; ".join(f"{f}: {', '.join(q)}" for f, q in sorted(QUANTIZATIONS.items()))
    parser.add_argument(
        "--quantization",
        choices=sorted({q for qs in QUANTIZATIONS.values() for q in qs}),
        help=f"weight type of the exported model (default: the format's first; {types})",
    )


def run(args: argparse.Namespace) -> int:
    quantization = args.quantization or QUANTIZATIONS[args.format][0]
    out = EXPORTERS[args.format](args.model_dir, args.out, quantization)
    print(f"exported {args.model_dir} to {out} ({args.format}); how to call it: {out}/README.md")
    return 0
