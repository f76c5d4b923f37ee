"""What a captured step (`--capture`) costs to compile in a new process: with TorchInductor's
on-disk cache empty, then filled by the run before.

    python -m benchmarks.investigations.compile_cache [--threads 1] [--int8] [--runs 3]

Each run is a new Python process on the base shape (`common.base_model`): the model prepared with
`capture=True`, then timed: the first greedy decoding of one source (it compiles the one-row
graph), a second one (compiled), the first beam-4 search of two sources (the graphs of beams
sharing a memory row) and a second one. Run 1 has an empty `TORCHINDUCTOR_CACHE_DIR`; the later
runs find what the earlier ones wrote there (qkv sets nothing: this is TorchInductor's own cache,
in /tmp/torchinductor_$USER unless the variable says otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import common

TOKENS = 30


def child(threads: int, int8: bool) -> dict[str, float]:
    """One process's timings (seconds)."""
    import torch

    from qkv.decode.search import beam_search, greedy
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.runtime_options import RuntimeOptions

    torch.set_num_threads(threads)
    start = time.perf_counter()
    settings = RuntimeOptions(precision="fp32", quantize="int8" if int8 else None, capture=True)
    model = prepare_for_decoding(common.base_model(), settings)
    times = {"prepare_s": time.perf_counter() - start}
    one = common.random_sentences(1, common.SRC_LEN)  # (1, S)
    two = common.random_sentences(2, common.SRC_LEN)  # (2, S)
    calls = {
        "greedy": lambda: greedy(model, one, min_len=TOKENS, max_len=TOKENS),
        "beam4": lambda: beam_search(model, two, beam=4, max_len=TOKENS),
    }
    with torch.inference_mode():
        for name, call in calls.items():
            for when in ("first", "second"):
                start = time.perf_counter()
                call()
                times[f"{name}_{when}_s"] = time.perf_counter() - start
    return {k: round(v, 2) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--int8", action="store_true", help="int8 weights (Int8Linear)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.threads, args.int8)))
        return
    print(common.describe(common.machine(), common.versions("torch")), end="")
    print(f"; {args.threads} threads; {'int8' if args.int8 else 'fp32'}")
    command = [sys.executable, "-m", "benchmarks.investigations.compile_cache", "--child"]
    command += ["--threads", str(args.threads)]
    command += ["--int8"] if args.int8 else []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONWARNINGS": "ignore"}
        for run in range(1, args.runs + 1):
            start = time.perf_counter()
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["process_s"] = round(time.perf_counter() - start, 1)
            print(f"run {run} ({'empty cache' if run == 1 else 'cache filled'}): {row}")


if __name__ == "__main__":
    main()
