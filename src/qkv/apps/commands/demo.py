"""`qkv demo`: train a small model on synthetic numbers and show how it translates."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "train a small model on the built-in synthetic corpus and translate with it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default="qkv-demo", help="where to save the model directory (default: %(default)s)"
    )
    parser.add_argument(
        "--target", default="en", choices=["en", "zh"], help="number words in English or Chinese"
    )
    parser.add_argument("--steps", type=int, help="training updates (default: the demo recipe's)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even if it is a non-empty directory that holds no demo run",
    )


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    if (Path(args.out) / "checkpoints").exists():
        raise ValueError(f"{args.out} already holds a demo run; choose another --out or delete it")
    print(f"training a small Transformer on synthetic numbers (digits -> {args.target} words) ...")
    result = run_demo(
        args.out, target=args.target, steps=args.steps, seed=args.seed, overwrite=args.overwrite
    )
    print(
        f"trained in {result.train_seconds:.0f} s; held-out examples "
        "(source | translation | reference):"
    )
    for src, hyp, ref in result.examples[:8]:
        print(f"  {src:<14} | {hyp} | {'ok' if hyp == ref else 'expected: ' + ref}")
    n = len(result.examples)
    print("exact-match accuracy by digit count (3+ digits: held-out numbers; 1-2: all of them):")
    for k, (right, total) in result.by_digits.items():
        print(f"  {k} digit{'s' if k > 1 else ' '}  {100 * right / total:5.1f}%  ({right}/{total})")
    print(f"accuracy: {100 * result.accuracy:.1f}% exact match on {n} test numbers")
    try_it = f"echo '4 0 5 2' | qkv translate --model {result.out_dir}"
    print(f"model saved to {result.out_dir}  (try: {try_it})")
    return 0
