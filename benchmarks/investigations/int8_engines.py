"""What int8 quantization measures to choose torch's int8 library for the base shape's layers.

`qkv.runtime.quantize.quantize_int8_measured` times the model's layers in two groups on each int8
library this CPU has (fbgemm, oneDNN): the encoder's and the memory projections at 24 and 768 rows
(one sentence's tokens, 32 sentences'), the decoder's and the output projection at 1 and 32. This
prints those times (ms for one pass over the group's layers) and each group's verdict, measured
afresh (nothing read from or written to the verdict cache):

    python -m benchmarks.investigations.int8_engines --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from benchmarks import common
from qkv.model.transformer import Transformer
from qkv.runtime import quantize


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(common.describe(common.machine(), common.versions("torch")))
    torch.manual_seed(0)
    model = Transformer(common.base_config()).eval()
    linears = {n: m for n, m in model.named_modules() if type(m) is nn.Linear}
    many = quantize.many_row_layers(linears)
    few = [n for n in linears if n not in many]
    engines = quantize.int8_engines()
    for label, group, rows in (("many-row", many, quantize.MANY_ROWS),
                               ("few-row", few, quantize.FEW_ROWS)):
        start = time.perf_counter()
        timer = quantize.time_int8_layers([linears[n] for n in group], engines, args.repeats)
        seconds = {e: {r: timer(e, r) for r in rows} for e in engines}
        took = time.perf_counter() - start
        for engine, times in seconds.items():
            cells = "  ".join(f"{r:4d} rows {t * 1e3:7.2f} ms" for r, t in times.items())
            print(f"{label:8s} ({len(group)} layers) {engine:7s} {cells}")
        print(f"{label:8s} verdict: {quantize.choose_engine(seconds)} (measured in {took:.2f} s)")


if __name__ == "__main__":
    main()
