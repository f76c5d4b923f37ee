"""The search's reductions: torch's `max(-1)` and `topk` against `qkv.decode.largest`, in µs (median
of --repeats calls), on random log-probs of the shapes a decoding step makes.

    python -m benchmarks.investigations.largest --threads 1

Greedy decoding picks each row's largest of V (rows = sentences); beam search the 2 beam largest of
a sentence's beam V candidates (rows = sentences). Every answer is checked against torch's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from qkv.decode.largest import first_max_index, top_k


def median_us(call: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[8000, 10000])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 300])
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; µs per call")
    print("| search | rows × width | torch | qkv.decode.largest | ratio |\n|---|---|--:|--:|--:|")
    k = 2 * args.beam
    for vocab in args.vocab:
        for rows in args.rows:
            x = torch.randn(rows, vocab).log_softmax(-1)
            assert torch.equal(first_max_index(x), x.argmax(-1))
            plain = median_us(lambda x=x: x.max(-1), args.repeats)
            ours = median_us(lambda x=x: first_max_index(x), args.repeats)
            print(f"| greedy | {rows} × {vocab} | {plain:.0f} | {ours:.0f} | {plain / ours:.2f} |")
            y = torch.randn(rows, args.beam * vocab).log_softmax(-1)
            assert torch.equal(top_k(y, k)[0], y.topk(k, dim=1).values)
            plain = median_us(lambda y=y: y.topk(k, dim=1), args.repeats)
            ours = median_us(lambda y=y: top_k(y, k), args.repeats)
            print(
                f"| beam {args.beam} (top {k}) | {rows} × {args.beam} · {vocab} | {plain:.0f} "
                f"| {ours:.0f} | {plain / ours:.2f} |"
            )


if __name__ == "__main__":
    main()
