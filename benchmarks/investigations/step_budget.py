"""Where a batch-1 decoding step of the base shape goes on this CPU: the linear layers against the
rest, and the linear layers against what the memory and the matmul kernels allow.

    python -m benchmarks.investigations.step_budget              # torch's threads (one per core)
    python -m benchmarks.investigations.step_budget --threads 1

At batch 1 greedy, each decoder step multiplies one row by every weight matrix the step uses (per
layer: the fused self-attention q, k, v, its output, the cross-attention query and output, the two
feed-forward matrices; then the output projection): the base shape reads ~104 MB of float32
weights per token, more than any CPU cache holds, so the step is bound by memory bandwidth and by
the fixed cost of each call. Four measurements, on the workload of `speed.py`'s batch-1 rows
(`common.py`: random base-shape model, 8 sentences one at a time, 30 forced tokens + eos):

1. step: ms per decoder step, and the part of it spent inside the linear layers (each layer's
   forward wrapped by a timer), for packed float32 weights (`qkv.runtime.packed`, the default),
   `nn.Linear` and int8 (`qkv.runtime.quantize`); "GB/s" is the weight bytes the linear layers
   read per step over their time.
2. bandwidth: `torch.sum` over a 400 MB float32 tensor, 1 and 2 threads: what streaming memory
   reaches here.
3. one-row products: one row by each of the step's float32 weights in turn, as oneDNN packed
   weights, `torch.addmm` on W^T stored contiguous (MKL), and `nn.Linear`: the linear layers' part
   of a step with nothing else around them.
4. fixed cost: one row by a 16 x 16 weight, per call, for the same kernels and torch's dynamic int8
   linear: what a call costs before it reads any weight.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from benchmarks import common
from qkv.decode.search import greedy
from qkv.runtime.packed import PackedLinear
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.runtime_options import RuntimeOptions

LINEARS = (nn.Linear, PackedLinear, torch.ao.nn.quantized.dynamic.Linear)
D_MODEL, D_FF = 512, 2048
# (in, out) of each weight a decoder step multiplies by: 6 layers, then the output projection
STEP_WEIGHTS = [
    (D_MODEL, 3 * D_MODEL),
    (D_MODEL, D_MODEL),
    (D_MODEL, D_MODEL),
    (D_MODEL, D_MODEL),
    (D_MODEL, D_FF),
    (D_FF, D_MODEL),
] * 6 + [(D_MODEL, common.VOCAB)]


def best_seconds(run: Callable[[], object], repeats: int = 10) -> float:
    """The fastest of `repeats` calls after a warm-up call."""
    return common.time_calls(run, repeats).best_seconds


def step_budget(setting: str, src: Tensor) -> str:
    """ms per step and the linear layers' share, greedy batch 1 over the sentences of `src`."""
    quantize = "int8" if setting == "int8" else None
    pack = {"packed": True, "nn.Linear": False, "int8": None}[setting]
    settings = RuntimeOptions(precision="fp32", quantize=quantize, pack=pack)
    model = prepare_for_decoding(common.base_model(), settings)
    spent = {"seconds": 0.0, "calls": 0, "bytes": 0}

    def timer(layer: nn.Module) -> Callable[[Tensor], Tensor]:
        forward = layer.forward
        size = layer.in_features * layer.out_features * (1 if quantize else 4)

        def timed_forward(x: Tensor) -> Tensor:
            start = time.perf_counter()
            y = forward(x)
            spent["seconds"] += time.perf_counter() - start
            spent["calls"] += 1
            spent["bytes"] += size
            return y

        return timed_forward

    for layer in [*model.decoder.modules(), model.output_projection]:
        if isinstance(layer, LINEARS):
            layer.forward = timer(layer)

    def run() -> None:
        with torch.inference_mode():
            for sentence in src:
                greedy(model, sentence[None], min_len=common.NEW_TOKENS, max_len=common.NEW_TOKENS)

    run()  # warm-up
    spent.update(seconds=0.0, calls=0, bytes=0)
    seconds = common.time_calls(run, 1, warmup=0).seconds
    steps = len(src) * (common.NEW_TOKENS + 1)  # + the step that scores the forced eos
    linear = spent["seconds"] / steps
    return (
        f"  {setting:9s} {seconds / steps * 1e3:6.2f} ms/step "
        f"({len(src) * common.NEW_TOKENS / seconds:5.1f} tokens/s): linear layers "
        f"{linear * 1e3:5.2f} ms in {spent['calls'] / steps:.1f} calls reading "
        f"{spent['bytes'] / steps / 1e6:.0f} MB ({spent['bytes'] / steps / linear / 1e9:.1f} "
        f"GB/s), the rest (the encoder's share included) "
        f"{(seconds / steps - linear) * 1e3:.2f} ms"
    )


def bandwidth() -> str:
    """GB/s of torch.sum over 400 MB of float32."""
    x = torch.ones(100_000_000)
    return f"{x.numel() * 4 / best_seconds(lambda: x.sum()) / 1e9:.1f} GB/s"


def one_row_products() -> dict[str, str]:
    """ms and GB/s of one row by each float32 weight of a decoder step, per kernel."""
    torch.manual_seed(0)
    layers = [nn.Linear(i, o) for i, o in STEP_WEIGHTS]
    size = sum(layer.weight.numel() * 4 for layer in layers)
    rows = {i: torch.randn(1, i) for i in (D_MODEL, D_FF)}
    packed = [PackedLinear(layer, 1) for layer in layers]
    transposed = [(layer.bias.detach(), layer.weight.detach().t().contiguous()) for layer in layers]
    kernels: dict[str, list[Callable[[Tensor], Tensor]]] = {
        "oneDNN packed": packed,
        "addmm on W^T": [lambda x, b=b, w=w: torch.addmm(b, x, w) for b, w in transposed],
        "nn.Linear": layers,
    }
    found = {}
    with torch.inference_mode():
        for name, calls in kernels.items():

            def step(calls: list[Callable[[Tensor], Tensor]] = calls) -> None:
                for call, (i, _) in zip(calls, STEP_WEIGHTS, strict=True):
                    call(rows[i])

            seconds = best_seconds(step)
            found[name] = f"{seconds * 1e3:5.2f} ms ({size / seconds / 1e9:4.1f} GB/s)"
    return found


def fixed_costs() -> dict[str, float]:
    """µs per call of one row by a 16 x 16 weight (median of 200 rounds of 10 calls)."""
    layer = nn.Linear(16, 16)
    b, w_t = layer.bias.detach(), layer.weight.detach().t().contiguous()
    int8 = torch.ao.nn.quantized.dynamic.Linear(16, 16)
    kernels = {
        "oneDNN packed": PackedLinear(layer, 1),
        "addmm on W^T": lambda x: torch.addmm(b, x, w_t),
        "nn.Linear": layer,
        "int8 dynamic": int8,
    }
    x = torch.randn(1, 16)
    found = {}
    with torch.inference_mode():
        for name, call in kernels.items():
            timing = common.time_calls(partial(call, x), 200, warmup=0, calls=10)
            found[name] = timing.seconds * 1e6
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, help="torch threads (default: one per core)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    print(common.describe(common.machine(), common.versions("torch")), f"; {threads} threads")
    src = common.random_sentences(common.BATCH1_SENTENCES, common.SRC_LEN)
    print("1. greedy batch 1, per decoder step:")
    for setting in ("packed", "nn.Linear", "int8"):
        print(step_budget(setting, src), flush=True)
    print(f"2. memory bandwidth, torch.sum over 400 MB: {bandwidth()} ({threads} threads)", end="")
    torch.set_num_threads(1)
    print(f", {bandwidth()} (1 thread)")
    for n in dict.fromkeys((threads, 1)):
        torch.set_num_threads(n)
        print(
            f"3. one row by the step's {len(STEP_WEIGHTS)} float32 weights "
            f"({n} thread{'s' if n > 1 else ''}):"
        )
        for name, result in one_row_products().items():
            print(f"  {name:14s} {result}")
    print("4. fixed cost per call, one row by a 16 x 16 weight (1 thread):")
    for name, micros in fixed_costs().items():
        print(f"  {name:14s} {micros:5.1f} µs")


if __name__ == "__main__":
    main()
