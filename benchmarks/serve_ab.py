"""Two trees of qkv served side by side and measured in pairs: one client's latency and N clients'
throughput of `qkv serve`, before against after a change, on one machine in one sitting.

    git worktree add --detach ../before HEAD~5
    python -m benchmarks.serve_ab --model qkv-demo --before ../before --after .
    python -m benchmarks.serve_ab --model qkv-demo --before ../before --after . --clients 8 --no-batching

Both servers run at once (`--threads` each; the idle one takes no CPU), each from its tree's src/.
Latency: the same one-sentence request to each in turn, which one goes first alternating,
`--requests` times after `--warmup` untimed ones; per pair the difference after - before, their
median and a bootstrap 95% interval. Throughput: `--clients` closed-loop clients (serve.py's
`run_clients`) decode `--window-sentences` sentences on one server, then on the other (A B B A
...), `--windows` times; per adjacent pair of windows the ratio after / before, and their median.
Pairing puts the machine's drift, larger than most changes on a shared machine, on both sides
alike.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import common
from .serve import Server, post, run_clients, sentences

TEXTS = ["4 0 5 2", "1 9 8 4", "3 0 0 7 1 6", "2 5", "9 9 9 1 2"]


def latency_pairs(urls: list[str], requests: int, warmup: int = 50) -> dict[str, Any]:
    """Paired one-client latencies (ms) of the servers at urls[0] (before) and urls[1] (after)."""
    connections = []
    for url in urls:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        connections.append(http.client.HTTPConnection(host, int(port), timeout=60))
    for i in range(warmup):
        for connection in connections:
            post(connection, {"text": TEXTS[i % len(TEXTS)]})
    before, after = [], []
    for i in range(requests):
        body = {"text": TEXTS[i % len(TEXTS)]}
        order = (0, 1) if i % 2 == 0 else (1, 0)
        took = {k: post(connections[k], body) for k in order}
        before.append(1e3 * took[0])
        after.append(1e3 * took[1])
    for connection in connections:
        connection.close()
    diffs = [b - a for a, b in zip(before, after, strict=True)]
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return {"requests": requests, "before_median_ms": statistics.median(before),
            "after_median_ms": statistics.median(after),
            "after_minus_before_median_ms": statistics.median(diffs),
            "ci95_ms": [boots[49], boots[1949]]}


def throughput_pairs(urls: list[str], clients: int, windows: int, size: int) -> dict[str, Any]:
    """Sentences/s of alternating windows (A B B A ...) and the after / before ratio of each pair."""
    texts = sentences("demo", size * (windows + 2), 0)
    run_clients(urls[0], texts[:size], clients, {})  # warm-up, both
    run_clients(urls[1], texts[size : 2 * size], clients, {})
    rates: list[list[float]] = [[], []]
    for w in range(windows):
        k = (0, 1, 1, 0)[w % 4]
        window = texts[(w + 2) * size : (w + 3) * size]
        rates[k].append(run_clients(urls[k], window, clients, {})["sentences_per_s"])
    ratios = [b / a for a, b in zip(rates[0], rates[1], strict=False)]
    return {"clients": clients, "windows": windows, "window_sentences": size,
            "before_sentences_per_s": rates[0], "after_sentences_per_s": rates[1],
            "after_over_before_median": statistics.median(ratios),
            "after_over_before_range": [min(ratios), max(ratios)],
            "pairs_lower_after": sum(r < 1 for r in ratios), "pairs": len(ratios)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model directory both trees can serve")
    parser.add_argument("--before", required=True, type=Path, help="the tree before the change")
    parser.add_argument("--after", required=True, type=Path, help="the tree after it")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each server")
    parser.add_argument("--no-batching", action="store_true", help="both servers without it")
    parser.add_argument("--requests", type=int, default=1500, help="latency: requests per tree")
    parser.add_argument("--warmup", type=int, default=50, help="latency: requests first, untimed")
    parser.add_argument("--clients", type=int, default=8, help="throughput: concurrent clients")
    parser.add_argument("--windows", type=int, default=40, help="throughput: windows (even)")
    parser.add_argument("--window-sentences", type=int, default=400, help="sentences per window")
    parser.add_argument("--json", default="benchmarks/results/serve-ab.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    software = common.versions("torch", "fastapi", "uvicorn")
    print(common.describe(common.machine(), software), flush=True)
    trees = [args.before.resolve(), args.after.resolve()]
    with ThreadPoolExecutor(2) as pool:  # both start at once; one that fails stops the other
        starting = [pool.submit(Server, Path(args.model), args.threads, not args.no_batching, 5.0,
                                tree) for tree in trees]  # fmt: skip
    failed = [f.exception() for f in starting if f.exception()]
    if failed:
        for f in starting:
            if not f.exception():
                f.result().stop()
        raise failed[0]
    servers = [f.result() for f in starting]
    try:
        urls = [s.url for s in servers]
        latency = latency_pairs(urls, args.requests, args.warmup)
        print(json.dumps(latency), flush=True)
        throughput = throughput_pairs(urls, args.clients, args.windows, args.window_sentences)
        print(json.dumps(throughput), flush=True)
    finally:
        for server in servers:
            server.stop()
    args_json = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result = {"machine": common.machine(), "versions": software, "args": args_json,
              "latency": latency, "throughput": throughput}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
