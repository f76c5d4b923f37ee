"""The default decoding path on this CPU (`qkv.runtime.choice`): what the calibration measures and
chooses for the base shape, and every path's end-to-end greedy speed at batch 1 and batch 32.

    python -m benchmarks.investigations.default_path

The calibration runs in a fresh cache (a temporary QKV_CACHE_DIR) and prints its line. Then each
path decodes 25-token sources with 30 forced tokens: 8 sentences one at a time, and 64 in batches
of 32; tokens/s = median of 3 runs.
"""

from __future__ import annotations

import os
import tempfile
import time

from benchmarks import common

TOKENS = 30


def greedy_speed(settings: dict, sources: list, batch: int) -> float:
    import torch

    from qkv.decode.search import greedy
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.runtime_options import RuntimeOptions

    model = prepare_for_decoding(
        common.base_model(), RuntimeOptions(**{"precision": "fp32", **settings})
    )
    batches = [torch.cat(sources[i : i + batch]) for i in range(0, len(sources), batch)]

    def run() -> None:
        for src in batches:
            greedy(model, src, min_len=TOKENS, max_len=TOKENS)

    with torch.inference_mode():
        run()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return len(sources) * TOKENS / sorted(times)[1]


def main() -> None:
    import torch

    from qkv.runtime.choice import choose_decoding_path
    from qkv.runtime.precision import native_bf16

    print(common.describe(common.machine(), common.versions("torch")), end="")
    print(f"; {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["QKV_CACHE_DIR"] = cache
        start = time.perf_counter()
        path = choose_decoding_path(common.base_model(), "cpu")
        print(f"calibration {time.perf_counter() - start:.1f} s: {path.why}")
    chosen = dict(precision=path.precision, pack=path.pack, plain_rows=path.plain_rows)
    paths = [("chosen", chosen)]
    for precision in ["fp32", "bf16"] if native_bf16("cpu") else ["fp32"]:
        paths += [(f"{precision} plain", dict(precision=precision, pack=False))]
        paths += [(f"{precision} packed", dict(precision=precision, pack=True))]
        paths += [
            (
                f"{precision} packed, plain for one row",
                dict(precision=precision, pack=True, plain_rows=1),
            )
        ]
    sources = [s[None] for s in common.random_sentences(64, common.SRC_LEN)]
    for name, settings in paths:
        one = greedy_speed(settings, sources[:8], 1)
        many = greedy_speed(settings, sources, 32)
        print(f"{name:36s} greedy tokens/s: batch 1 {one:6.0f}, batch 32 {many:6.0f}")


if __name__ == "__main__":
    main()
