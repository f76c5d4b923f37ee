"""Training steps of the multi30k-wide model on random batches: RSS and the median step time.

How the allocator and oneDNN's primitive cache behave over batch shapes (docs/benchmarks.md,
"Training memory"):

    python -m benchmarks.investigations.train_shapes fixed 14 --tokens 8192
    python -m benchmarks.investigations.train_shapes varied 160 --tokens 2048
    LD_PRELOAD=libtcmalloc_minimal.so.4 \
        python -m benchmarks.investigations.train_shapes fixed 14 --tokens 8192 --glibc default

"fixed" trains on one shape (256 x 32 tokens at --tokens 8192), "varied" on a new (rows, S, T)
nearly every step. Freed memory is kept (`keep_freed_memory`, as `qkv train` sets it) unless
`--glibc default`; set ONEDNN_PRIMITIVE_CACHE_CAPACITY in the environment to try other oneDNN
caches. Prints RSS and the median step of the last 10 every `--every` steps.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from qkv.model.transformer import Transformer
from qkv.runtime.process import keep_freed_memory
from qkv.runtime.training import prepare_for_training
from qkv.train.loss import TranslationLoss
from qkv.train.recipe import load_train_config


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes", choices=["fixed", "varied"])
    p.add_argument("steps", type=int)
    p.add_argument("--tokens", type=int, default=8192, help="rows x longest length per batch")
    p.add_argument("--glibc", choices=["kept", "default"], default="kept")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--every", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(2)
    if args.glibc == "kept":
        keep_freed_memory()
    cfg = load_train_config("configs/multi30k-wide.yaml")
    model = Transformer(cfg.model_config(10000, 10000))
    prepare_for_training(model, args.precision, torch.device("cpu"))
    loss_fn = TranslationLoss(model, 0.1, cfg.loss_chunk_tokens)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rng, times = random.Random(0), [time.perf_counter()]
    for step in range(1, args.steps + 1):
        s, t = (32, 32) if args.shapes == "fixed" else (rng.randint(8, 60), rng.randint(8, 60))
        rows = args.tokens // max(s, t)
        src, tgt = torch.randint(4, 10000, (rows, s)), torch.randint(4, 10000, (rows, t + 1))
        with autocast:
            loss, _ = loss_fn(src, tgt[:, :-1], tgt[:, 1:])
        (loss / 1000).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter())
        if step % args.every == 0:
            last = [b - a for a, b in zip(times[-11:-1], times[-10:], strict=True)]
            median = statistics.median(last)
            print(f"step {step}: RSS {rss_mib():.0f} MiB, median step {median:.2f} s", flush=True)


if __name__ == "__main__":
    main()
