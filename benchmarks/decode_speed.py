"""Decoding speed: greedy and beam 4, batch 1 and batch 32, on a model of the paper's base shape.

    python benchmarks/decode_speed.py                      # the table of docs/benchmarks.md, ~2 min on 2 cores
    python benchmarks/decode_speed.py --device cuda --repeats 5

The model has random weights, the base shape (6 + 6 layers, d_model 512, 8 heads, d_ff 2048) and a shared
8k vocabulary; the sources are random 25-token sentences (+ eos). A random model rarely ends on its own,
so every hypothesis is made exactly `--new-tokens` long (min_len = max_len = 30: eos forbidden before,
forced after): the work is the same in every setting and nothing depends on when a random model stops.
tokens/s counts the output tokens of the returned hypotheses (eos excluded; a beam of 4 computes 4 times
as many). Batch 1 decodes `--batch1-sentences` sentences one at a time; batch 32 decodes 32 at once.
Each time is the median of `--repeats` runs after one warm-up run. "cache off" recomputes the whole
prefix at every step (the reference the cache must match); it shows what the cache saves.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from qkv import Transformer, TransformerConfig
from qkv.decode import beam_search, greedy


def decode_all(model: Transformer, src: torch.Tensor, beam: int, batch_size: int, new_tokens: int,
               use_cache: bool) -> float:
    """Seconds to decode every row of src (N, S) in batches of batch_size."""
    if src.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(0, src.size(0), batch_size):
        batch = src[i : i + batch_size]
        if beam == 1:
            greedy(model, batch, min_len=new_tokens, max_len=new_tokens, use_cache=use_cache)
        else:
            beam_search(model, batch, beam=beam, min_len=new_tokens, max_len=new_tokens, use_cache=use_cache)
    if src.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--src-len", type=int, default=25, help="source tokens (eos added)")
    parser.add_argument("--new-tokens", type=int, default=30, help="output tokens per hypothesis")
    parser.add_argument("--batch1-sentences", type=int, default=8, help="sentences decoded one at a time")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's, one per core)")
    parser.add_argument("--json", default="benchmarks/results/decode_speed.json", help="where to write results")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("base", src_vocab_size=args.vocab, dropout=0.0, attention_dropout=0.0)
    model = Transformer(cfg).to(args.device).eval()
    src = torch.randint(4, args.vocab, (32, args.src_len + 1), device=args.device)
    src[:, -1] = cfg.eos_id

    settings = [  # (name, beam, batch size, cache)
        ("greedy", 1, 1, True), ("greedy", 1, 32, True), ("beam 4", 4, 1, True), ("beam 4", 4, 32, True),
        ("greedy", 1, 1, False), ("greedy", 1, 32, False),
    ]
    rows = []
    header = f"| {'search':<8} | batch | cache | sentences | median s | sentences/s | tokens/s |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for name, beam, batch_size, use_cache in settings:
        n = args.batch1_sentences if batch_size == 1 else 32
        decode_all(model, src[:batch_size], beam, batch_size, args.new_tokens, use_cache)  # warm-up
        seconds = statistics.median(decode_all(model, src[:n], beam, batch_size, args.new_tokens, use_cache)
                                    for _ in range(args.repeats))
        row = {"search": name, "beam": beam, "batch": batch_size, "cache": use_cache, "sentences": n,
               "median_seconds": seconds, "sentences_per_second": n / seconds,
               "tokens_per_second": n * args.new_tokens / seconds}
        rows.append(row)
        print(f"| {name:<8} | {batch_size:>5} | {'on' if use_cache else 'off':>5} | {n:>9} | {seconds:>8.2f} "
              f"| {row['sentences_per_second']:>11.1f} | {row['tokens_per_second']:>8.0f} |", flush=True)

    result = {
        "benchmark": "decode_speed", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                    "device": args.device,
                    "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
                    "load_average_before_after": [load_before[0], os.getloadavg()[0]]},
        "torch": torch.__version__, "python": platform.python_version(), "settings": vars(args), "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; wrote {args.json}")


if __name__ == "__main__":
    main()
