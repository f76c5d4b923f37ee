"""`qkv train`: train a model directory from a recipe; every flag its parser does not declare is
a `--key value` override of the recipe (`args.overrides`, split off by `qkv.apps.cli`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

HELP = (
    "train a translation model (or --task lm, mlm, classify); extra --key value pairs override "
    "the config"
)
DESCRIPTION = (
    "Train a model directory. Every TrainConfig key can be given as --key value (model keys as "
    "--model.KEY value); an unknown key is an error."
)
PARSER = {"allow_abbrev": False}  # an override is never taken for an abbreviated flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config", nargs="?", help="YAML recipe (see configs/); defaults apply without one"
    )
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into --out even if it is a non-empty directory that holds no training run",
    )
    parser.add_argument(
        "--allow-data-change",
        action="store_true",
        help="--resume even if the training or validation data differs from the run's",
    )
    parser.set_defaults(overrides=[])  # the undeclared flags: config overrides


def run(args: argparse.Namespace) -> int:
    from ...runtime.process import configure_process
    from ...train import Trainer, load_train_config, parse_overrides
    from ...train.distributed import resolve_device
    from ._flags import restart_on_cpu

    cfg = load_train_config(args.config, parse_overrides(args.overrides))
    restart_on_cpu(args, resolve_device(cfg.device))  # flat memory where tcmalloc is installed
    configure_process(**cfg.process_settings())  # threads, seed, allocator: before anything runs
    try:
        trainer = Trainer(
            cfg,
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            allow_data_change=args.allow_data_change,
        )
        result = trainer.train()
    except KeyboardInterrupt:
        _report_interrupt(args)
        return 130
    best = ""
    if result.best_step is not None:
        best = f"; best {cfg.valid_metric} at step {result.best_step}"
    print(f"trained {result.step} steps{best}; model directory: {result.out_dir}")
    return 0


def _report_interrupt(args: argparse.Namespace) -> None:
    """After Ctrl-C: where the last checkpoint is and the command that resumes."""
    from ...train.checkpoints import list_checkpoints

    done = list_checkpoints(Path(args.out))
    if not done:
        message = "qkv train: interrupted before the first checkpoint; nothing to resume"
        print(message, file=sys.stderr)
        return
    command = ["qkv", "train", *([args.config] if args.config else []), "--out", args.out]
    command += ["--resume", *args.overrides]
    print(
        f"qkv train: interrupted; the last checkpoint is {done[-1]}\n"
        f"continue with: {shlex.join(command)}",
        file=sys.stderr,
    )
