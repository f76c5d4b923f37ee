"""One decoding setting of the base shape in this process: tokens/s and peak RSS, for A/B runs of
two trees.

Run it alternately against two checkouts, each in a fresh process, so that only the code differs:

    git worktree add /tmp/before <commit>
    for i in 1 2; do for tree in /tmp/before/src src; do
        PYTHONPATH=$tree python -m benchmarks.investigations.decode_ab --search beam --batch 32 \
            --workers 2 --tag $tree
    done; done

The same work as the qkv rows of benchmarks/speed.py (benchmarks/common.py defines both): a
random base-shape model (6 + 6 layers, d_model 512, 8 heads, d_ff 2048, 8k shared vocabulary)
prepared as `Translator.load` prepares it (`qkv.runtime.prepare.prepare_for_decoding`: packed
float32 weights on a CPU), random 25-token sources + eos, every hypothesis forced to exactly 30
tokens; batch 1 decodes 8 sentences one at a time, batch 32 decodes 64 in batches of 32 (on
`--workers` threads). tokens/s is the median of `--repeats` runs after a warm-up run (the timing
helper of this checkout, whichever tree PYTHONPATH names); "others' cores" is the CPU that other
processes used meanwhile (a noisy A/B shows there). `--cache-off` decodes without the decoder cache
(every step recomputes the prefix). `--attention-loops` runs a captured step's attention as
TorchInductor's loops instead of the C++ kernel, `--int8-torch` an int8 step's layers on torch's
products instead of qkv's int8 kernel (A/B runs within one tree). `--profile` prints
where the time of one batch goes instead (torch.profiler, operators by self time; with
`--capture` the compiled program's kernels and the ATen calls it makes are listed too).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch

from benchmarks import common
from qkv.decode.search import beam_search, greedy
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.runtime_options import RuntimeOptions
from qkv.runtime.workers import ForkedWorkers, map_in_workers


def add_path_options(parser: argparse.ArgumentParser) -> None:
    """The decoding path's options: device, precision, int8, a captured step and its kernels."""
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16: weights cast once, as `--precision bf16` decodes",
    )
    parser.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 linear layers, as `--quantize int8` decodes (fp32 otherwise)",
    )
    parser.add_argument(
        "--capture", action="store_true", help="decode through a captured step, as `--capture`"
    )
    parser.add_argument(
        "--onednn-margin",
        type=float,
        help="with --capture --quantize int8: runtime.int8_choice.ONEDNN_MARGIN (0: never oneDNN's "
        "product for several rows, 1e9: always; default: measured)",
    )
    parser.add_argument(
        "--attention-loops",
        action="store_true",
        help="with --capture: the step's attention in TorchInductor's loops, not the C++ kernel "
        "(qkv.runtime.kernels)",
    )
    parser.add_argument(
        "--int8-torch",
        action="store_true",
        help="with --capture --quantize int8: the layers on torch._int_mm / oneDNN, not qkv's "
        "int8 kernel (qkv.runtime.kernels)",
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--search", choices=["greedy", "beam"], default="beam", help="greedy or beam 4"
    )
    parser.add_argument("--batch", type=int, choices=[1, 32], default=32)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="batches decoded at once, on worker threads unless --processes",
    )
    parser.add_argument(
        "--processes",
        choices=["kept", "per-call"],
        help="workers in forked processes of one thread: forked once and kept "
        "(`ForkedWorkers`, as a Translator does) or forked for every call",
    )
    parser.add_argument(
        "--threads", type=int, help="torch intra-op threads (default: torch's, one per core)"
    )
    add_path_options(parser)
    parser.add_argument("--cache-off", action="store_true", help="decode without the decoder cache")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tag", default="", help="a label printed first (which tree this is)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing, print torch.profiler's table of one batch",
    )
    return parser.parse_args()


def prepared_model(args: argparse.Namespace) -> torch.nn.Module:
    """The base-shape model prepared for decoding as the options say."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.onednn_margin is not None:
        import qkv.runtime.int8_choice

        qkv.runtime.int8_choice.ONEDNN_MARGIN = args.onednn_margin
    if args.int8_torch:
        import qkv.runtime.captured

        qkv.runtime.captured.int8_linear = lambda: None
    if args.profile:
        torch._inductor.config.cpp.enable_kernel_profile = True  # a captured step's kernels
    settings = RuntimeOptions(
        device=args.device, precision=args.precision, quantize=args.quantize, capture=args.capture
    )
    model = prepare_for_decoding(common.base_model().to(args.device), settings)
    if args.attention_loops:
        model.decoder.attention_kernel = False
    return model


def profile(
    one: Callable[[torch.Tensor], Any], run: Callable[[], Any], batch: torch.Tensor
) -> None:
    """torch.profiler's table of one batch, after a warm-up run."""
    run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        one(batch)
    print(
        prof.key_averages().table(
            sort_by="self_cpu_time_total", row_limit=16, max_name_column_width=50
        )
    )


def setting(args: argparse.Namespace) -> str:
    """The measured setting, in words."""
    processes = f" processes {args.processes}" if args.processes else ""
    return (
        f"{args.search} b{args.batch} workers {args.workers}{processes} "
        f"{args.quantize or args.precision}{' captured' if args.capture else ''}"
        f"{' attention loops' if args.attention_loops else ''}"
        f"{' int8 torch' if args.int8_torch else ''}{' cache off' if args.cache_off else ''}"
    )


def main() -> None:
    args = parse_args()
    model = prepared_model(args)
    n = common.BATCH32_SENTENCES if args.batch == 32 else common.BATCH1_SENTENCES
    new_tokens, use_cache = common.NEW_TOKENS, not args.cache_off
    src = common.random_sentences(n, common.SRC_LEN).to(args.device)
    jobs = [src[i : i + args.batch] for i in range(0, n, args.batch)]

    def one(batch: torch.Tensor) -> list[Any]:
        if args.search == "greedy":
            return greedy(model, batch, min_len=new_tokens, max_len=new_tokens, use_cache=use_cache)
        return beam_search(
            model, batch, beam=4, min_len=new_tokens, max_len=new_tokens, use_cache=use_cache
        )

    kept = ForkedWorkers(one, args.workers) if args.processes == "kept" else None

    def run() -> list[Any]:
        if kept is not None:
            out = kept.map(jobs)
        else:
            out = map_in_workers(one, jobs, args.workers, processes=args.processes == "per-call")
        if src.is_cuda:
            torch.cuda.synchronize()
        return out

    if args.profile:
        print(args.tag)
        profile(one, run, jobs[0])
        return
    times, _ = common.timed(run, args.repeats)
    print(
        f"{args.tag}\t{setting(args)}"
        f"\t{n * new_tokens / times['seconds']:.1f} tokens/s"
        f"\tpeak RSS {common.memory_mb('VmHWM'):.0f} MB"
        f"\tothers' cores {times['other_cores']:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
