"""A greedy batch-1 decoding step of the base shape, eager against captured (`--capture`,
`qkv.runtime.captured`): milliseconds per step, the operators torch runs per step, and what the
first call costs (the compilation).

    python -m benchmarks.investigations.captured_step [--threads 1]
    python -m benchmarks.investigations.captured_step --int8-split 8   # the int8 kinds only
    python -m benchmarks.investigations.captured_step --kernel-split 8 # qkv's int8 kernel or not
    python -m benchmarks.investigations.captured_step --products       # the products only
    python -m benchmarks.investigations.captured_step --attention      # the attention kernel only

Each path decodes the same 8 sources one at a time, 30 tokens forced; per step = median of 3 runs
over 240 tokens (the encoder's share included). Each path's outputs are compared with the first's
(fp32, nn.Linear): the captured fp32 step gives the same tokens. Operators: `torch.profiler` events per step in one
run (an eager step dispatches every module's operators; a captured step is one compiled call and
the few operators around it).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from functools import partial

from benchmarks import common

TOKENS = 30


def paths(bf16: bool) -> list[tuple[str, dict]]:
    rows = [
        ("fp32 eager (nn.Linear)", dict(pack=False, precision="fp32")),
        ("fp32 eager (packed)", dict(pack=True, precision="fp32")),
        ("int8 eager (fbgemm dynamic)", dict(quantize="int8")),
        ("fp32 captured", dict(pack=False, precision="fp32", capture=True)),
        ("int8 captured (Int8Linear)", dict(quantize="int8", capture=True)),
    ]
    if bf16:
        rows += [
            ("bf16 eager (packed)", dict(pack=True, precision="bf16")),
            ("bf16 captured", dict(pack=False, precision="bf16", capture=True)),
        ]
    return rows


def measure(settings: dict, sources: list) -> dict[str, float]:
    import torch

    from qkv.decode.search import greedy
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.runtime_options import RuntimeOptions

    model = prepare_for_decoding(
        common.base_model(), RuntimeOptions(**{"precision": "fp32", **settings})
    )

    def run() -> list[list[int]]:
        return [greedy(model, src, min_len=TOKENS, max_len=TOKENS)[0].tokens for src in sources]

    with torch.inference_mode():
        start = time.perf_counter()
        tokens = run()
        first = time.perf_counter() - start
        times = []
        for _ in range(3):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            greedy(model, sources[0], min_len=TOKENS, max_len=TOKENS)
    steps = len(sources) * TOKENS
    return {
        "ms_per_step": sorted(times)[1] / steps * 1e3,
        "ops_per_step": len(prof.events()) / TOKENS,
        "first_run_s": first,
        "tokens": tokens,
    }


def prequantized_calls(int8: list, rows: int) -> dict[str, Callable[[], list]]:
    """The int8 layers' products on inputs quantized beforehand: `torch._int_mm` alone (int8
    inputs), and oneDNN's prepacked int8 linear (`onednn.qlinear_pointwise`, uint8 inputs)."""
    import torch

    d, d_ff = common.D_MODEL, 4 * common.D_MODEL
    signed = {n: torch.randint(-127, 128, (rows, n), dtype=torch.int8) for n in (d, d_ff)}
    unsigned = {n: torch.randint(0, 256, (rows, n), dtype=torch.uint8) for n in (d, d_ff)}
    packed = [torch.ops.onednn.qlinear_prepack(m.qweight, None) for m in int8]
    zero = [torch.zeros(m.out_features, dtype=torch.long) for m in int8]

    def int_mm() -> list:
        return [torch._int_mm(signed[m.in_features], m.qweight.t()) for m in int8]

    def qlinear() -> list:
        return [
            torch.ops.onednn.qlinear_pointwise(  # input (scale, zero point), weight (scales,
                unsigned[m.in_features], 0.05, 128, w, m.scale, z, m.bias,  # zero points), bias;
                1.0, 0, torch.float32, "none", [], "",  # output scale, zero point, dtype, no post-op
            )
            for m, w, z in zip(int8, packed, zero, strict=True)
        ]

    return {"_int_mm alone": int_mm, "oneDNN qlinear": qlinear}


def kernels(rows: int) -> dict[str, float]:
    """Milliseconds for the 37 products of a step (6 decoder layers and the output projection)
    of `rows` input rows, by kernel: float32 nn.Linear, int8 fbgemm (what --quantize int8 runs
    eagerly), int8 `Int8Linear` on `torch._int_mm` and, where it runs, on qkv's int8 kernel
    (`qkv.runtime.kernels.int8_linear`, what a captured int8 step runs with AVX512-VNNI), and
    two kernels on inputs quantized beforehand: `torch._int_mm` alone, and oneDNN's prepacked
    int8 linear of torch's x86 quantization backend (`onednn.qlinear_pointwise`, uint8 inputs).
    Each kind runs its 37 products 10 times in turn (~27 MB of int8 weights: read from memory,
    as a step reads them), the median."""
    import torch
    from torch import nn

    from qkv.runtime import kernels as qkv_kernels
    from qkv.runtime.captured import Int8Linear
    from qkv.runtime.quantize import quantize_int8

    d, d_ff = common.D_MODEL, 4 * common.D_MODEL
    layer = [(d, 3 * d), (d, d), (d, d), (d, d), (d, d_ff), (d_ff, d)]  # in, out
    plain = [nn.Linear(i, o) for i, o in layer * common.LAYERS + [(d, common.VOCAB)]]
    kinds = {
        "fp32 nn.Linear": plain,
        "int8 fbgemm": list(quantize_int8(nn.Sequential(*plain))),
        "int8 _int_mm": [Int8Linear(m) for m in plain],
    }
    if qkv_kernels.int8_linear() is not None:
        kinds["int8 qkv kernel"] = [Int8Linear(m) for m in plain]
        for m in kinds["int8 qkv kernel"]:
            m.use_kernel()
    inputs = {n: torch.randn(rows, n) for n in (d, d_ff)}
    xs = [inputs[m.in_features] for m in plain]

    def products(layers: list) -> list:
        return [m(x) for m, x in zip(layers, xs, strict=True)]

    calls = {name: partial(products, layers) for name, layers in kinds.items()}
    calls |= prequantized_calls(kinds["int8 _int_mm"], rows)
    with torch.inference_mode():
        return {name: common.time_calls(run, 10).seconds * 1e3 for name, run in calls.items()}


def int8_split(rounds: int) -> None:
    """A captured int8 model as qkv builds it (fbgemm's int8 for the encoder's layers and the
    memory projections, `Int8Linear` in the step) against `Int8Linear` for every linear layer."""
    import copy

    from torch import nn

    from qkv.runtime.captured import Int8Linear, capture_decoder
    from qkv.runtime.decoding_attention import use_decoding_attention
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.runtime_options import RuntimeOptions
    from qkv.runtime.swap import replace_modules

    int8_captured = RuntimeOptions(precision="fp32", quantize="int8", capture=True)

    base = common.base_model()
    every = replace_modules(
        use_decoding_attention(copy.deepcopy(base).eval()), nn.Linear, Int8Linear
    )
    models = {
        "as qkv builds it": prepare_for_decoding(base, int8_captured),
        "Int8Linear everywhere": capture_decoder(every),
    }
    interleaved(models, rounds)


def kernel_split(rounds: int) -> None:
    """A captured int8 model as qkv builds it, its layers on qkv's int8 kernel, against the same
    built as on a CPU without AVX512-VNNI (`torch._int_mm` / oneDNN, the output projection
    fbgemm's)."""
    import copy

    import qkv.runtime.captured as captured
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.runtime_options import RuntimeOptions

    int8_captured = RuntimeOptions(precision="fp32", quantize="int8", capture=True)

    base = common.base_model()
    models = {"qkv kernel": prepare_for_decoding(copy.deepcopy(base), int8_captured)}
    built, captured.int8_linear = captured.int8_linear, lambda: None
    try:
        models["torch's products"] = prepare_for_decoding(base, int8_captured)
    finally:
        captured.int8_linear = built
    interleaved(models, rounds)


def attention_calls() -> None:
    """µs per call of the step's attention kernel (`qkv::decoding_attention`, float16 keys and
    values as an int8 step caches them) at the shapes a step makes: one query a row (greedy) or a
    sentence's four beams stacked (beam 4's cross-attention), over L keys; each with its keys and
    values in the cache (one layer's, called again and again) and not (48 layers' in turn, each
    read once a round: 80 MB at 32 rows and 26 keys, more than an L3 holds)."""
    import statistics

    import torch

    from qkv.runtime import kernels as qkv_kernels

    op = qkv_kernels.decoding_attention()
    if op is None:
        return print("the attention kernel is not built here")
    heads, d_head = common.HEADS, common.D_MODEL // common.HEADS
    for rows, queries, keys in ((1, 1, 26), (1, 4, 26), (32, 1, 8), (32, 1, 26), (32, 1, 32)):
        q = torch.randn(rows, heads, queries, d_head)
        mask = torch.ones(rows, 1, 1, keys, dtype=torch.bool)
        layers = [torch.randn(2, rows, heads, keys, d_head).half() for _ in range(48)]
        result = []
        for caches in (layers[:1], layers):
            times = []
            for _ in range(max(20, 600 // len(caches))):
                start = time.perf_counter()
                for kv in caches:
                    op(q, kv[0], kv[1], mask, d_head**-0.5)
                times.append((time.perf_counter() - start) / len(caches))
            result.append(statistics.median(times[3:]) * 1e6)
        print(
            f"attention, {rows:2d} rows x {queries} queries over {keys:2d} keys: "
            f"{result[0]:6.1f} µs a call in the cache, {result[1]:6.1f} µs read from memory"
        )


def interleaved(models: dict, rounds: int) -> None:
    """Two models decoding the same sources in one process, interleaved over `rounds` runs of
    each workload: median tokens/s and the first's ratio to the second."""
    import statistics

    import torch

    from qkv.decode.beam import beam_search
    from qkv.decode.search import greedy

    (name_a, name_b) = models
    for beam, rows in ((1, 1), (4, 1), (1, 32), (4, 32)):
        src = common.random_sentences(rows, common.SRC_LEN)
        kw = dict(min_len=TOKENS, max_len=TOKENS)
        search = greedy if beam == 1 else partial(beam_search, beam=beam)
        times: list[list[float]] = [[], []]
        with torch.inference_mode():
            for model in models.values():
                search(model, src, **kw)  # compiles
            for _ in range(rounds):
                for model, runs in zip(models.values(), times, strict=True):
                    start = time.perf_counter()
                    search(model, src, **kw)
                    runs.append(time.perf_counter() - start)
        a_s, b_s = (statistics.median(t) for t in times)
        print(
            f"beam {beam}, {rows:2d} sentences: {name_a} {rows * TOKENS / a_s:5.0f} tokens/s, "
            f"{name_b} {rows * TOKENS / b_s:5.0f} ({b_s / a_s:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument(
        "--int8-split",
        type=int,
        metavar="ROUNDS",
        help="only compare the int8 kinds of a captured model (`int8_split`) over ROUNDS runs",
    )
    parser.add_argument(
        "--kernel-split",
        type=int,
        metavar="ROUNDS",
        help="only compare a captured int8 model on qkv's int8 kernel and on torch's products "
        "(`kernel_split`) over ROUNDS runs",
    )
    parser.add_argument(
        "--products", action="store_true", help="only time the step's products by kernel"
    )
    parser.add_argument(
        "--attention", action="store_true", help="only time the step's attention kernel"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(common.describe(common.machine(), common.versions("torch")), end="")
    print(f"; {torch.get_num_threads()} threads")
    if args.int8_split:
        return int8_split(args.int8_split)
    if args.kernel_split:
        return kernel_split(args.kernel_split)
    if args.attention:
        return attention_calls()
    if not args.products:
        compare_paths()
    for rows in (1, 4, 32, 128):
        times = ", ".join(f"{k} {v:.2f}" for k, v in kernels(rows).items())
        print(f"the step's 37 products, {rows:3d} rows (ms): {times}")


def compare_paths() -> None:
    """Each decoding path's ms per step, profiler events, first run and outputs."""
    from qkv.runtime.precision import native_bf16

    sources = [s[None] for s in common.random_sentences(8, common.SRC_LEN)]
    reference = None  # the first path's tokens (fp32, nn.Linear)
    for name, settings in paths(native_bf16("cpu")):
        r = measure(settings, sources)
        reference = reference or r["tokens"]
        same = sum(a == b for a, b in zip(r["tokens"], reference, strict=True))
        print(
            f"{name:28s} {r['ms_per_step']:6.2f} ms/step ({1e3 / r['ms_per_step']:5.0f} tokens/s), "
            f"{r['ops_per_step']:6.0f} profiler events/step, first run {r['first_run_s']:5.1f} s, "
            f"{same}/{len(sources)} outputs as fp32 eager"
        )


if __name__ == "__main__":
    main()
