"""`qkv demo`: train a small model on synthetic numbers (or, with `--corpus multi30k`, on real
English -> German in a time budget) and show how it translates."""

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
    parser.add_argument(
        "--corpus",
        default="synthetic",
        choices=["synthetic", "multi30k"],
        help="synthetic numbers (no data needed), or real English -> German from Multi30k "
        "(read from --data-dir) trained for --minutes",
    )
    parser.add_argument("--data-dir", help="multi30k: the named corpora's folder (or QKV_DATA_DIR)")
    parser.add_argument(
        "--download",
        action="store_true",
        help="multi30k: download the files missing from --data-dir (each checked by its sha256)",
    )
    parser.add_argument(
        "--minutes", type=float, default=15.0, help="multi30k: the whole run's time budget"
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
    if args.corpus == "multi30k":
        return _language(args)
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


def _language(args: argparse.Namespace) -> int:
    from ..demo import run_language_demo

    print(f"training English -> German on Multi30k for at most {args.minutes:g} minutes ...")
    extra: dict[str, object] = {"download": args.download}
    if args.steps is not None:
        extra["max_steps"] = args.steps
    result = run_language_demo(
        args.out, args.data_dir, args.minutes, args.seed, args.overwrite, **extra
    )
    print(f"trained {result.steps} updates in {result.train_seconds:.0f} s; test_2016_flickr:")
    for src, hyp, ref in result.examples:
        print(f"  {src}\n    -> {hyp}\n    reference: {ref}")
    print(
        f"BLEU {result.tokenized_bleu:.2f} (tokenized, lowercase: the published Multi30k metric), "
        f"sacreBLEU {result.bleu:.2f} (case-insensitive), in {result.seconds:.0f} s in all"
    )
    print(f"attention of the first test sentence: {result.figures[0].parent}")
    try_it = f"qkv explain --model {result.out_dir} 'A dog runs in the snow.'"
    print(f"model saved to {result.out_dir}  (try: {try_it}, or qkv serve and /explain)")
    return 0
