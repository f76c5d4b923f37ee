"""RSS against updates over a `qkv train` run: the memory row of docs/benchmarks.md ("Training memory").

    python -m benchmarks.train_memory --csv rss.csv -- configs/multi30k-wide.yaml --out /tmp/m \\
        --data-dir ../shared/data --precision bf16 --max_steps 1000 --log_every 25
    python -m benchmarks.train_memory --plot docs/results/train-memory.png before.csv after.csv

The first form runs `python -m qkv train ARGS` and samples its RSS every `--every` seconds, with the last
update its log.csv has reached then (so log often: `--log_every 25`); it prints the RSS at updates 200 and
1,000 (or the last) and their ratio. The second plots such files, one line each, labelled by file name.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path


def rss_mib(pid: int) -> float:
    """The resident set of process `pid` in MiB (0 once it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def last_step(log: Path) -> int:
    """The last update that a run's log.csv records (0 before its first row)."""
    try:
        rows = log.read_text().splitlines()[1:]
    except OSError:
        return 0
    return int(rows[-1].split(",")[0]) if rows else 0


def record(train_args: list[str], every: float) -> list[tuple[float, int, float]]:
    """(seconds, update, RSS MiB) samples of one `qkv train` run, until it ends."""
    out = Path(train_args[train_args.index("--out") + 1])
    process = subprocess.Popen([sys.executable, "-m", "qkv", "train", *train_args])
    start, samples = time.monotonic(), []
    while process.poll() is None:
        samples.append((time.monotonic() - start, last_step(out / "log.csv"), rss_mib(process.pid)))
        time.sleep(every)
    return samples


def at_update(samples: list[tuple[float, int, float]], update: int) -> float:
    """The largest RSS sampled while the run's log stood at `update` or below."""
    return max((rss for _, step, rss in samples if step <= update), default=float("nan"))


def plot(files: list[Path], out: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for file in files:
        with file.open() as f:
            rows = [(int(r["update"]), float(r["rss_mib"]) / 1024) for r in csv.DictReader(f)]
        ax.plot([u for u, _ in rows], [g for _, g in rows], label=file.stem)
    ax.set(xlabel="update", ylabel="RSS (GiB)", title="qkv train: RSS against updates")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="where to write the samples")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--plot", type=Path, help="plot the CSV files given as arguments here")
    parser.add_argument("args", nargs="*", help="`qkv train` arguments (after --), or CSV files")
    args = parser.parse_args()
    if args.plot:
        plot([Path(a) for a in args.args], args.plot)
        return
    samples = record(args.args, args.every)
    if args.csv:
        with args.csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["seconds", "update", "rss_mib"])
            writer.writerows((f"{s:.0f}", u, f"{r:.0f}") for s, u, r in samples)
    last = max(u for _, u, _ in samples)
    early, late = at_update(samples, 200), at_update(samples, min(last, 1000))
    print(f"RSS at update 200: {early:.0f} MiB; at update {min(last, 1000)}: {late:.0f} MiB "
          f"({late / early:.2f}x); peak {max(r for *_, r in samples):.0f} MiB")


if __name__ == "__main__":
    main()
