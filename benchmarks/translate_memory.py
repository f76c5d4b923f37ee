"""RSS against lines translated by `qkv translate --input` on a big file: the streaming row of
docs/benchmarks.md ("Translating a big file").

    python -m benchmarks.translate_memory --model qkv-demo --data-dir ../shared/data \\
        --lines 1000000 --marks 1000 5000 10000 20000 -- --beam 1 --max-len-a 0 --max-len-b 1
    python -m benchmarks.translate_memory --model qkv-demo --src /work/main/src ...   # another code

It writes a file of `--lines` lines (Multi30k's English training sentences, repeated) under
--work, runs `python -m qkv translate --model M --input FILE ARGS` with stdout to a file, samples
the process's RSS and the lines written every `--every` seconds, and stops the run once the last
mark is reached: a million lines need not all be translated to see whether memory grows with
them. It prints the RSS before the first line is written and at each mark.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.train_memory import rss_mib

ROOT = Path(__file__).resolve().parents[1]


def big_file(data_dir: Path, lines: int, work: Path) -> Path:
    """`lines` lines of Multi30k's train.en, repeated, written once under `work`."""
    path = work / f"multi30k-train-en-x{lines}.txt"
    if not path.exists():
        with gzip.open(data_dir / "multi30k" / "train.en.gz", "rt", encoding="utf-8") as f:
            sentences = f.read().splitlines()
        with path.open("w", encoding="utf-8") as out:
            for i in range(lines):
                out.write(sentences[i % len(sentences)] + "\n")
    return path


def record(command: list[str], env: dict[str, str], output: Path, last: int, every: float):
    """(seconds, lines written, RSS MiB) samples of one run, until it writes `last` lines or
    ends; the run is stopped then."""
    samples: list[tuple[float, int, float]] = []
    written = 0
    with output.open("wb") as out, output.open("rb") as reading:
        process = subprocess.Popen(command, stdout=out, env=env)
        start = time.monotonic()
        while process.poll() is None and written < last:
            written += reading.read().count(b"\n")
            samples.append((time.monotonic() - start, written, rss_mib(process.pid)))
            time.sleep(every)
        process.terminate()
        process.wait()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines of the input file")
    parser.add_argument("--marks", type=int, nargs="+", default=[1000, 5000, 10000, 20000])
    parser.add_argument("--data-dir", type=Path, required=True, help="holds multi30k/train.en.gz")
    parser.add_argument("--work", type=Path, default=Path("/tmp/qkv-translate-memory"))
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the qkv code to run")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("args", nargs="*", help="`qkv translate` arguments (after --)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    source = big_file(args.data_dir, args.lines, args.work)
    command = [sys.executable, "-m", "qkv", "translate", "--model", args.model]
    command += ["--input", str(source), *args.args]
    env = {**os.environ, "PYTHONPATH": str(args.src)}
    samples = record(command, env, args.work / "out.txt", max(args.marks), args.every)
    first = max((rss for _, n, rss in samples if n == 0), default=float("nan"))
    print(f"{args.lines:,} lines in; code {args.src}")
    print(f"before the first line: {first:.0f} MiB")
    for mark in args.marks:
        reached = [(s, rss) for s, n, rss in samples if n >= mark]
        if reached:
            seconds, rss = reached[0]
            print(f"{mark:>9,} lines: {rss:.0f} MiB ({seconds:.0f} s)")
    print(f"peak: {max(rss for *_, rss in samples):.0f} MiB")


if __name__ == "__main__":
    main()
