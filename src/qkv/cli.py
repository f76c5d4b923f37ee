"""The `qkv` command line: thin wrappers over the Python API.

    qkv params --preset base --vocab 37000     parameter count of a preset
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .config import PRESETS, TransformerConfig


def cmd_params(args: argparse.Namespace) -> int:
    from .model import count_parameters

    cfg = TransformerConfig.preset(args.preset, src_vocab_size=args.vocab)
    n = count_parameters(cfg)
    print(f"{args.preset}: {n:,} parameters ({n / 1e6:.1f}M) with a shared vocabulary of {args.vocab:,}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qkv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("params", help="print the parameter count of a preset")
    p.add_argument("--preset", default="base", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (paper: 37000)")
    p.set_defaults(func=cmd_params)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # user errors: one clear line, no traceback
        print(f"qkv {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
