"""`qkv params`: the parameter count of a preset."""

from __future__ import annotations

import argparse

from ...config import PRESETS, TransformerConfig

HELP = "print the parameter count of a preset"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="base", choices=sorted(PRESETS))
    parser.add_argument(
        "--vocab", type=int, default=37000, help="shared vocabulary size (paper: 37000)"
    )


def run(args: argparse.Namespace) -> int:
    from ...model import count_parameters

    cfg = TransformerConfig.preset(args.preset, src_vocab_size=args.vocab)
    n = count_parameters(cfg)
    vocabulary = f"a shared vocabulary of {args.vocab:,}"
    print(f"{args.preset}: {n:,} parameters ({n / 1e6:.1f}M) with {vocabulary}")
    return 0
