"""A trained model translating a real test set in this process, warm: lines/s after a first pass
(which compiles a captured step), for A/B runs of two trees.

    git worktree add /tmp/before <commit>
    for i in 1 2; do for tree in /tmp/before/src src; do
        PYTHONPATH=$tree python -m benchmarks.investigations.translate_ab --model M \
            --src ../shared/data/multi30k/test_2016_flickr.en.gz --quantize int8 --capture \
            --beam 4 --tag $tree
    done; done

Unlike `decode_ab.py` (random model, every output forced to 30 tokens), the outputs end where the
model says, sentences leave their batch as they finish, and the decoder cache is sized as
`qkv translate` sizes it (for the longest output allowed, source + 50 tokens). `Translator.load`
with the runtime options given, `Translator.translate` with its default batching; the time is the
median of `--repeats` passes after the first (the timing helper of this checkout), "others' cores"
the CPU other processes used meanwhile, and the process's peak RSS. The outputs of every pass
must be the same. The allocator is the one the process starts with: qkv's commands run with
tcmalloc on the CPU (`LD_PRELOAD=libtcmalloc_minimal.so.4` here, glibc's without).
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import common
from qkv.apps.translator import Translator
from qkv.data.corpus import read_lines
from qkv.decode.options import DecodeOptions
from qkv.runtime.runtime_options import RuntimeOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model directory (qkv's format)")
    parser.add_argument("--src", required=True, help="sources, one per line (.gz read as gzip)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--quantize", choices=["int8"])
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="fp32")
    parser.add_argument("--capture", action="store_true", help="decode through a captured step")
    parser.add_argument(
        "--pack",
        action=argparse.BooleanOptionalAction,
        help="packed float32 weights or not (default: what `Translator.load` chooses)",
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tag", default="", help="a label printed first (which tree this is)")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    lines = read_lines(args.src)
    runtime = RuntimeOptions(
        quantize=args.quantize, precision=args.precision, capture=args.capture, pack=args.pack
    )
    translator = Translator.load(args.model, runtime)
    options = DecodeOptions(beam=args.beam)
    outputs: list[list[str]] = []

    def run() -> None:
        outputs.append(translator.translate(lines, options))

    times, _ = common.timed(run, args.repeats)
    same = all(o == outputs[0] for o in outputs)
    print(
        f"{args.tag}\tbeam {args.beam} {args.quantize or args.precision}"
        f"{' captured' if args.capture else ''}\t{len(lines) / times['seconds']:.1f} lines/s"
        f"\tfirst pass {times['first_call_seconds']:.1f} s\tothers' cores "
        f"{times['other_cores']:.2f}\tpeak RSS {common.memory_mb('VmHWM'):.0f} MB"
        f"\tsame outputs every pass: {same}",
        flush=True,
    )
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
