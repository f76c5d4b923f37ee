"""One decoding setting of the base shape in this process: tokens/s and peak RSS, for A/B runs of two trees.

Run it alternately against two checkouts, each in a fresh process, so that only the code differs:

    git worktree add /tmp/before <commit>
    for i in 1 2; do for tree in /tmp/before/src src; do
        PYTHONPATH=$tree python benchmarks/decode_ab.py --search beam --batch 32 --workers 2 --tag $tree
    done; done

Same work as benchmarks/speed.py's qkv rows: a random base-shape model (6 + 6 layers, d_model 512, 8k vocabulary)
prepared as `Translator.load` does on a CPU (packed float32 weights), random 25-token sources + eos, every
hypothesis forced to exactly 30 tokens; batch 1 decodes 8 sentences one at a time, batch 32 decodes 64 in
batches of 32 (on `--workers` threads). tokens/s is the median of `--repeats` runs after a warm-up run.
`--profile` prints where the time of one batch goes instead (torch.profiler, operators by self time).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from qkv import Transformer, TransformerConfig
from qkv.runtime.prepare import prepare_for_decoding
from qkv.decode import beam_search, greedy
from qkv.runtime.workers import map_in_workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", choices=["greedy", "beam"], default="beam", help="greedy or beam 4")
    parser.add_argument("--batch", type=int, choices=[1, 32], default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tag", default="", help="a label printed first (which tree this is)")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, print torch.profiler's table of one batch (where a step goes)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = prepare_for_decoding(Transformer(TransformerConfig(src_vocab_size=8000)).eval(), "cpu")
    n = 64 if args.batch == 32 else 8
    src = torch.randint(4, 7998, (n, 26))
    src[:, -1] = 3  # eos
    jobs = [src[i:i + args.batch] for i in range(0, n, args.batch)]

    def one(batch: torch.Tensor) -> list:
        if args.search == "greedy":
            return greedy(model, batch, min_len=30, max_len=30)
        return beam_search(model, batch, beam=4, min_len=30, max_len=30)

    map_in_workers(one, jobs, args.workers)  # warm-up
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            one(jobs[0])
        print(args.tag)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))
        return
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        map_in_workers(one, jobs, args.workers)
        times.append(time.perf_counter() - start)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.tag}\t{args.search} b{args.batch} workers {args.workers}\t"
          f"{n * 30 / statistics.median(times):.1f} tokens/s\tpeak RSS {peak_mb:.0f} MB", flush=True)


if __name__ == "__main__":
    main()
