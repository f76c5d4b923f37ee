"""Training on millions of pairs: time to the first update, peak RSS and disk against corpus size.

    python -m benchmarks.scale --data-dir ../shared/data --work /tmp/scale --sizes 0.03 0.5 1.5 4.5 \\
        --ranks-at 4.5 --old-tree /tmp/qkv-old --json scale.json --plot docs/results/scale-rss.png

For each size (millions of pairs) it builds a corpus from Multi30k's training set (de-en), shuffled
afresh for each copy (seeded) until it holds that many pairs (files under --work, never in the
repository), and times `qkv train` with a tiny model and `--max_steps 3`:

- first: prepared data made from scratch (its own --prepared_dir under --work);
- second: another --out on the same files and settings, so the prepared data is found;
- sampling: the second run with `--subword_dropout 0.1`: it draws the first epoch's segmentation
  (SentencePiece's unigram sampling) from the mapped text before its first update;
- in memory: the same command in another checkout (--old-tree: a tree whose `qkv train` holds the
  corpus in Python lists, e.g. `git worktree add --detach /tmp/qkv-old 1ab8782`);
- with --ranks-at: the first and second run again as 2 gloo ranks (torchrun), RSS per rank and summed.

Seconds to the first update are read from log.csv (--log_every 1), RSS from /proc every 0.2 s over
the whole process tree (torchrun and its ranks), disk with the size of the prepared folder.
Preparation tokens/s: the prepared ids' tokens over (first run's seconds to the first update minus
the second run's). Run it alone on the machine: other work slows every time it reports.
`--from-json scale.json [--plot P]` prints the table (and draws the plot) of a saved run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import describe, machine, versions

MULTI30K_PAIRS = 29_000


def build_corpus(data_dir: Path, work: Path, pairs: int) -> tuple[Path, Path]:
    """train.de / train.en of `pairs` Multi30k pairs, copies shuffled with seeds 0, 1, ..."""
    src, tgt = work / f"corpus-{pairs}.de", work / f"corpus-{pairs}.en"
    if src.is_file() and tgt.is_file():
        return src, tgt
    de, en = (gzip.decompress((data_dir / "multi30k" / f"train.{lang}.gz").read_bytes())
              .decode("utf-8").splitlines() for lang in ("de", "en"))
    with open(src, "w", encoding="utf-8") as fs, open(tgt, "w", encoding="utf-8") as ft:
        written, copy = 0, 0
        while written < pairs:
            order = np.random.default_rng(copy).permutation(len(de))[: pairs - written]
            fs.write("".join(de[i] + "\n" for i in order))
            ft.write("".join(en[i] + "\n" for i in order))
            written, copy = written + len(order), copy + 1
    return src, tgt


def tree_rss_mib(root: int) -> dict[int, tuple[float, float]]:
    """{pid: (RSS MiB, PSS MiB)} of process `root` and all its descendants (PSS shares the pages
    that ranks map from the same files among them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    rss, todo = {}, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            fields = dict(line.split(":", 1) for line in
                          Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
            rss[pid] = (int(fields["Rss"].split()[0]) / 1024, int(fields["Pss"].split()[0]) / 1024)
        except (OSError, KeyError, ValueError):
            pass
    return rss


def first_update_seen(out: Path) -> bool:
    try:
        return len((out / "log.csv").read_text().splitlines()) > 1
    except OSError:
        return False


def timed_run(command: list[str], out: Path, env: dict[str, str]) -> dict[str, float]:
    """Seconds to the first update and peak RSS (summed over the tree, and the largest process),
    and the peak of the PSS summed over the tree."""
    start = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=open(out.with_suffix(".log"), "w"))  # noqa: SIM115
    first, peak_sum, peak_pss, peak_one = float("nan"), 0.0, 0.0, 0.0
    while process.poll() is None:
        rss = tree_rss_mib(process.pid)
        peak_sum = max(peak_sum, sum(r for r, _ in rss.values()))
        peak_pss = max(peak_pss, sum(p for _, p in rss.values()))
        peak_one = max(peak_one, max((r for r, _ in rss.values()), default=0))
        if first != first and first_update_seen(out):
            first = time.monotonic() - start
        time.sleep(0.2)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: see {out}.log")
    return {"first_update_s": first, "peak_rss_mib": peak_sum, "peak_pss_mib": peak_pss,
            "peak_rss_one_mib": peak_one}


def train_command(src: Path, tgt: Path, data_dir: Path, out: Path, prep: Path, ranks: int) -> list[str]:
    val = data_dir / "multi30k"
    head = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "-m", "qkv"] \
        if ranks > 1 else [sys.executable, "-m", "qkv"]
    return [*head, "train", "--out", str(out), "--train_src", str(src), "--train_tgt", str(tgt),
            "--valid_src", str(val / "val.de.gz"), "--valid_tgt", str(val / "val.en.gz"),
            "--preset", "tiny", "--vocab_size", "8000", "--max_steps", "3", "--log_every", "1",
            "--valid_bleu", "false", "--valid_metric", "loss", "--tensorboard", "false", "--prepared_dir", str(prep),
            "--device", "cpu"]


def disk_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def prepared_tokens(prep: Path) -> int:
    manifest = json.loads(next(prep.glob("ids-*/manifest.json")).read_text())
    return sum(size for name, (size, _) in manifest["files"].items() if name.endswith(".bin")) // (
        2 if manifest["dtype"] == "uint16" else 4)


def measure(args: argparse.Namespace, size: float) -> list[dict]:
    pairs = round(size * 1e6)
    work = args.work / f"{pairs}"
    work.mkdir(parents=True, exist_ok=True)
    src, tgt = build_corpus(args.data_dir, args.work, pairs)
    rows = []
    env = {**os.environ, "PYTHONPATH": str(Path.cwd() / "src")}
    runs = [("first", 1), ("second", 1), ("sampling", 1)]
    if size in (args.ranks_at or []):
        runs += [("first", 2), ("second", 2)]
    for name, ranks in runs:
        prep = work / f"prep-{ranks}"
        if name == "first":
            subprocess.run(["rm", "-rf", str(prep)], check=True)
        out = work / f"out-{name}-{ranks}"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        command = train_command(src, tgt, args.data_dir, out, prep, ranks)
        if name == "sampling":  # the first epoch's segmentation drawn (unigram sampling)
            command += ["--subword_dropout", "0.1"]
        row = timed_run(command, out, env)
        rows.append({"pairs": pairs, "path": "prepared", "run": name, "ranks": ranks, **row,
                     "disk_mib": disk_mib(prep)})
        print(json.dumps(rows[-1]), flush=True)
    first, second = rows[0]["first_update_s"], rows[1]["first_update_s"]
    rows[0]["prepare_tokens_per_s"] = prepared_tokens(work / "prep-1") / max(first - second, 1e-9)
    if args.old_tree:
        out = work / "out-old"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        old_env = {**os.environ, "PYTHONPATH": str(args.old_tree / "src")}
        command = train_command(src, tgt, args.data_dir, out, work / "unused", 1)
        command = [*command[: command.index("--prepared_dir")], "--device", "cpu"]
        rows.append({"pairs": pairs, "path": "in memory", "run": "any", "ranks": 1,
                     **timed_run(command, out, old_env)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (label, path_, run, ranks) in (("prepared, first run", "prepared", "first", 1),
                                       ("prepared, second run", "prepared", "second", 1),
                                       ("in memory", "in memory", "any", 1)):
        points = sorted((r["pairs"] / 1e6, r["peak_rss_mib"] / 1024) for r in rows
                        if r["path"] == path_ and r["run"] == run and r["ranks"] == ranks)
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
    ax.set_xlabel("training pairs (millions)")
    ax.set_ylabel("peak RSS of qkv train (GiB)")
    ax.set_title("qkv train --preset tiny --max_steps 3")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table(rows: list[dict]) -> str:
    """The rows as docs/benchmarks.md's Markdown table."""
    lines = ["| pairs | data | run | ranks | first update | peak RSS (sum) | PSS (sum) | disk | "
             "preparation |", "|--:|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        prep = r.get("prepare_tokens_per_s")
        disk = r.get("disk_mib")
        lines.append(
            f"| {r['pairs'] / 1e6:.2f}M | {r['path']} | {r['run']} | {r['ranks']} | "
            f"{r['first_update_s']:.0f} s | {r['peak_rss_mib'] / 1024:.2f} GiB | "
            f"{r['peak_pss_mib'] / 1024:.2f} GiB | "
            f"{'–' if disk is None else f'{disk:,.0f} MiB'} | "
            f"{'–' if prep is None else f'{prep / 1e6:.2f}M tokens/s'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/qkv-scale"))
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.03, 0.5, 1.5, 4.5])
    parser.add_argument("--ranks-at", type=float, nargs="*", help="sizes also run as 2 gloo ranks")
    parser.add_argument("--old-tree", type=Path, help="a checkout whose qkv train holds lists")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--from-json", type=Path, help="print the table and plot of a saved run")
    args = parser.parse_args()
    if args.from_json:
        rows = json.loads(args.from_json.read_text())["rows"]
        print(table(rows))
        if args.plot:
            plot(rows, args.plot)
        return
    args.data_dir, args.work = args.data_dir.resolve(), args.work.resolve()
    print(describe(machine(), versions("torch", "sentencepiece", "numpy")), flush=True)
    rows = [row for size in args.sizes for row in measure(args, size)]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
