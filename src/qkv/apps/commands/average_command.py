"""`qkv average`: the mean of the last (or best) N checkpoints of a training run."""

from __future__ import annotations

import argparse

HELP = "average the last (or best) N checkpoints of a training run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="the training run's output directory")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--last", type=int, default=10, help="how many of the newest checkpoints (default: 10)"
    )
    which.add_argument(
        "--best",
        type=int,
        metavar="N",
        help="the N consecutive kept checkpoints with the best mean validation score "
        "(the run's valid_metric)",
    )
    parser.add_argument(
        "--out", help="write a new model directory here (default: replace the run's weights)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even if it is a non-empty directory (its model is replaced)",
    )


def run(args: argparse.Namespace) -> int:
    from ...train.average import average_into, average_run, best_window

    if args.best is not None:
        window = best_window(args.model, args.best)
        mean = -window.mean if window.metric == "loss" else window.mean  # a loss is negated
        print(f"the best {args.best} in a row: mean validation {window.metric} {mean:.4g}")
        paths = window.paths
        target = average_into(args.model, paths, args.out, args.overwrite)
    else:
        target, paths = average_run(args.model, args.last, args.out, args.overwrite)
    print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) into {target}")
    return 0
