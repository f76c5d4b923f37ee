"""`qkv figures`: the ideas of the paper drawn as PNGs (docs/concepts.md)."""

from __future__ import annotations

import argparse

HELP = "draw every idea of the paper as a PNG, from qkv's own modules (docs/concepts.md)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the PNG files (e.g. docs/figures)")
    parser.add_argument("--small", action="store_true", help="small sizes and a quick demo model")
    parser.add_argument(
        "--demo-model", help="a model directory for the cross-attention figure (default: train one)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="draw only these figures")


def run(args: argparse.Namespace) -> int:
    from ..figures import make_figures

    paths = make_figures(args.out, small=args.small, demo_model=args.demo_model, only=args.only)
    print(f"wrote {len(paths)} figures to {args.out}")
    return 0
