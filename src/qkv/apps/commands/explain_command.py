"""`qkv explain`: one sentence through a model, step by step, as a Markdown page (`apps.explain`):
the model's own translation of it (greedy) is the target the decoder reads."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...runtime.runtime_options import RuntimeOptions
from ..translator import Translator
from ..walkthrough import explain_sentence

HELP = "one sentence through the model, every tensor's shape and numbers (Markdown)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a model directory (or hf:ORG/NAME)")
    parser.add_argument("sentence", help="the source sentence")
    parser.add_argument("--out", help="write the page to this file (default: stdout)")


def run(args: argparse.Namespace) -> int:
    if args.out and Path(args.out).exists():
        raise ValueError(f"--out {args.out} exists; choose a new file")
    translator = Translator.load(args.model, RuntimeOptions(precision="fp32", pack=False))
    text, lines = explain_sentence(translator, args.sentence)
    page = "\n".join([f"# {args.sentence} → {text}", "", *lines]) + "\n"
    if args.out:
        Path(args.out).write_text(page, encoding="utf-8")
    else:
        print(page, end="")
    return 0
