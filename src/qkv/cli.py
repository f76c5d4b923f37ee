"""The `qkv` command line: thin wrappers over the Python API.

    qkv params --preset base --vocab 37000        parameter count of a preset
    qkv train CONFIG --out DIR [--key value ...]  train a model directory (any config key can be overridden)
    qkv average --model DIR --last 10             average the last N checkpoints of a run
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .config import PRESETS, TransformerConfig


def cmd_params(args: argparse.Namespace) -> int:
    from .model import count_parameters

    cfg = TransformerConfig.preset(args.preset, src_vocab_size=args.vocab)
    n = count_parameters(cfg)
    print(f"{args.preset}: {n:,} parameters ({n / 1e6:.1f}M) with a shared vocabulary of {args.vocab:,}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .train import Trainer, load_train_config, parse_overrides

    cfg = load_train_config(args.config, parse_overrides(args.overrides))
    result = Trainer(cfg, args.out, resume=args.resume).train()
    best = "" if result.best_step is None else f"; best {cfg.valid_metric} at step {result.best_step}"
    print(f"trained {result.step} steps{best}; model directory: {result.out_dir}")
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from .train.average import average_run

    target, paths = average_run(args.model, args.last, args.out)
    print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) into {target}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qkv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("params", help="print the parameter count of a preset")
    p.add_argument("--preset", default="base", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (paper: 37000)")
    p.set_defaults(func=cmd_params)

    p = sub.add_parser("train", help="train a translation model; extra --key value pairs override the config",
                       description="Train a model directory. Every TrainConfig key can be given as --key value "
                                   "(model keys as --model.KEY value); an unknown key is an error.")
    p.add_argument("config", nargs="?", help="YAML recipe (see configs/); defaults apply without one")
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("average", help="average the last N checkpoints of a training run")
    p.add_argument("--model", required=True, help="the training run's output directory")
    p.add_argument("--last", type=int, default=10, help="how many of the newest checkpoints")
    p.add_argument("--out", help="write a new model directory here (default: replace the run's weights)")
    p.set_defaults(func=cmd_average)
    return parser


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """For `qkv train`: separate its own arguments from the `--key value` config overrides."""
    if not argv or argv[0] != "train":
        return argv, []
    own, overrides, i = argv[:1], [], 1
    while i < len(argv):
        token = argv[i]
        if token in ("--out", "--resume", "-h", "--help") or token.startswith("--out="):
            takes_value = token == "--out"
            own += argv[i: i + 1 + takes_value]
            i += 1 + takes_value
        elif token.startswith("--"):
            has_value = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            overrides += argv[i: i + 1 + has_value]
            i += 1 + has_value
        else:
            own.append(token)  # the config file
            i += 1
    return own, overrides


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, overrides = split_overrides(argv)
    args = parser.parse_args(argv)
    args.overrides = overrides
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return args.func(args)
    except ValueError as e:  # user errors: one clear line, no traceback
        print(f"qkv {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
