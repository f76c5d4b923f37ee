"""Train, average, decode and score one of the documented quality results (docs/results.md), resumably.

    python -m benchmarks.quality multi30k-en-de --data-dir ../shared/data          # train, average, score
    python -m benchmarks.quality multi30k-en-de --data-dir ../shared/data          # again: resumes the run
    python -m benchmarks.quality --plot docs/results/curves.png runs/quality/*/log.csv

Each result is a recipe in configs/ plus its evaluation: `qkv train` (with --resume when the run exists; a killed
run continues exactly), `qkv average` of the last checkpoints (`--window best`: of the checkpoints in a row with
the best mean validation score; `--average N`: N of them instead of 5), `qkv evaluate` on the test split with beam
search (Multi30k: tokenized lowercase BLEU against the official references, plus cased sacreBLEU and chrF;
Tatoeba: sacreBLEU, with the `zh` tokenizer into Chinese). Checkpoints are chosen by the validation split only; so
is the length penalty α when `--alphas` names several (each decodes the validation split once, the best α by the
result's metric then decodes the test split). Writes RUN/result.json and RUN-avg/test.hyp and prints 10 sample
translations; result.json also records the machine (CPU model, flags, cores) and versions. Where the CPU
multiplies bf16 natively (`qkv.runtime.precision`), the test split is decoded a second time with `--precision
bf16` at the same α, and result.json gains its scores as "bf16_decoding".
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
from pathlib import Path

from benchmarks import common
from benchmarks.common import QKV, parse_scores
from qkv.data.named import get_corpus
from qkv.runtime.precision import native_bf16

# name -> (recipe, overrides, corpus, pair, checkpoints averaged, beam)
RESULTS: dict[str, tuple[str, list[str], str, str, int, int]] = {
    "multi30k-en-de": ("configs/multi30k-wide.yaml", [], "multi30k", "en-de", 5, 5),
    "multi30k-en-de-linear": ("configs/multi30k-wide-linear.yaml", [], "multi30k", "en-de", 5, 5),
    "multi30k-en-de-bpedrop": ("configs/multi30k-wide.yaml", ["--subword_dropout", "0.1"], "multi30k", "en-de", 5, 5),
    "multi30k-en-de-lc": ("configs/multi30k-wide.yaml", ["--lowercase", "true"], "multi30k", "en-de", 5, 5),
    "multi30k-en-de-lc-bpedrop": ("configs/multi30k-wide.yaml",
                                  ["--lowercase", "true", "--subword_dropout", "0.1"],
                                  "multi30k", "en-de", 5, 5),
    "multi30k-en-de-small": ("configs/multi30k-small.yaml", [], "multi30k", "en-de", 5, 5),
    "multi30k-de-en": ("configs/multi30k-small.yaml", ["--src_lang", "de", "--tgt_lang", "en", "--max_steps", "8000",
                                                       "--max_hours", "1.95"], "multi30k", "de-en", 5, 5),
    "multi30k-de-en-bpedrop": ("configs/multi30k-wide.yaml",
                               ["--src_lang", "de", "--tgt_lang", "en", "--subword_dropout", "0.1"],
                               "multi30k", "de-en", 5, 5),
    "tatoeba-zh-en": ("configs/tatoeba-zh-en.yaml", [], "tatoeba-zh-en", "zh-en", 5, 5),
    "tatoeba-en-zh": ("configs/tatoeba-zh-en.yaml", ["--src_lang", "en", "--tgt_lang", "zh", "--max_hours", "1.95"],
                      "tatoeba-zh-en", "en-zh", 5, 5),
    "tatoeba-en-zh-sampling": ("configs/tatoeba-zh-en.yaml",
                               ["--src_lang", "en", "--tgt_lang", "zh", "--max_hours", "1.95",
                                "--max_steps", "19000", "--subword_dropout", "0.2"],
                               "tatoeba-zh-en", "en-zh", 5, 5),
    "tatoeba-en-zh-cosine": ("configs/tatoeba-zh-en.yaml",
                             ["--src_lang", "en", "--tgt_lang", "zh", "--max_hours", "1.95",
                              "--max_steps", "19000", "--subword_dropout", "0.2", "--schedule", "cosine"],
                             "tatoeba-zh-en", "en-zh", 5, 5),
}


def qkv(*args: str, capture: bool = False) -> str:
    cmd = [*QKV, *args]
    print("+ qkv " + " ".join(args), flush=True)
    res = subprocess.run(cmd, check=True, text=True, capture_output=capture)
    return (res.stdout + res.stderr) if capture else ""


def run_result(name: str, data_dir: str, runs: Path, extra: list[str], train: bool = True,
               alphas: tuple[float, ...] = (0.6,), window: str = "last", average: int | None = None) -> dict:
    config, overrides, corpus, pair, last, beam = RESULTS[name]
    last = average or last
    run, avg = runs / name, runs / f"{name}-avg"
    if train:
        resume = ["--resume"] if (run / "checkpoints").is_dir() else []
        qkv("train", config, "--out", str(run), "--data_dir", data_dir, *overrides, *extra, *resume)
    averaged = qkv("average", "--model", str(run), f"--{window}", str(last), "--out", str(avg), capture=True)
    print(averaged)

    def evaluate(split: str, alpha: float, *args: str) -> dict[str, float]:
        args = args if "--precision" in args else ("--precision", "fp32", *args)  # the fp32 rows
        text = qkv("evaluate", "--model", str(avg), "--corpus", corpus, "--pair", pair, "--beam", str(beam),
                   "--alpha", str(alpha), "--split", split, "--data-dir", data_dir, *args, capture=True)
        print(text)
        return parse_scores(text)

    named = get_corpus(corpus)
    splits = named.splits  # (train, validation, test)
    metric = "tok_bleu" if named.tok_splits else "bleu"  # the published metric where official tokenized refs exist
    on_valid = {a: evaluate(splits[1], a)[metric] for a in alphas} if len(alphas) > 1 else {}
    alpha = max(on_valid, key=on_valid.__getitem__) if on_valid else alphas[0]
    if on_valid and alpha == max(alphas):
        print(f"alpha {alpha} is the edge of the search: --alphas {alpha},{alpha + 0.5},{alpha + 1} "
              "--no-train looks past it")
    hyp_file = avg / "test.hyp"
    scores = evaluate(splits[-1], alpha, "--output", str(hyp_file))
    # `qkv evaluate` decodes on the CPU
    bf16 = evaluate(splits[-1], alpha, "--precision", "bf16") if native_bf16("cpu") else None
    with open(run / "log.csv", newline="") as f:
        log = list(csv.DictReader(f))
    result = {"result": name, "config": config, "overrides": overrides + extra, "pair": pair,
              "averaged": last, "window": window, "averaged_checkpoints": averaged.strip().splitlines()[-1],
              "beam": beam, "alpha": alpha, "valid_by_alpha": on_valid, "steps": int(log[-1]["step"]),
              "train_hours": float(log[-1]["elapsed_s"]) / 3600, **scores, "bf16_decoding": bf16,
              "samples": samples(corpus, pair, data_dir, hyp_file),
              "machine": common.machine(), "versions": common.versions("torch")}
    for s in result["samples"]:
        print(f"SRC {s['source']}\nREF {s['reference']}\nHYP {s['translation']}\n")
    (run / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return result


def samples(corpus: str, pair: str, data_dir: str, hyp_file: Path, n: int = 10) -> list[dict[str, str]]:
    """The first n test sentences: source, reference, translation."""
    from qkv.data.corpus import read_lines
    from qkv.data.named import named_paths

    src_lang, tgt_lang = pair.split("-")
    src, ref = named_paths(corpus, get_corpus(corpus).splits[-1], src_lang, tgt_lang, data_dir)
    rows = list(zip(read_lines(src), read_lines(ref), read_lines(hyp_file), strict=True))[:n]
    return [{"source": a, "reference": b, "translation": c} for a, b, c in rows]


PAIR = re.compile(r"([a-z0-9]+)-([a-z]{2})-([a-z]{2})(?:-|$)")  # corpus-src-tgt in a run's name


def run_label(path: str) -> str:
    """A run's name: its log file's stem, or its folder's name for RUN/log.csv."""
    return Path(path).stem if Path(path).stem != "log" else Path(path).parent.name


def by_pair(logs: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The logs grouped by the corpus and language pair in their names ("multi30k de→en"), each
    as (path, the rest of the name: "wide-lc-bf16", or "base" for the recipe itself)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for path in logs:
        name = run_label(path).removeprefix("cpu-").removeprefix("gpu-")
        match = PAIR.search(name)
        pair = f"{match[1]} {match[2]}→{match[3]}" if match else "other runs"
        rest = name[match.end():] if match else name
        groups.setdefault(pair, []).append((path, rest or "base"))
    return {pair: sorted(runs, key=lambda run: (run[1] != "base", run[1]))
            for pair, runs in sorted(groups.items())}


def plot(png: str, logs: list[str]) -> None:
    """Validation BLEU (greedy, sacreBLEU) and losses against updates: one row of two panels per
    corpus and language pair, one colour per run (its folder or file name is the label)."""
    from matplotlib.figure import Figure

    from qkv.apps.figures import save  # a small PNG of 256 colours at most

    groups = by_pair(logs)
    fig = Figure(figsize=(12, 3.3 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 2, squeeze=False)
    for (ax_bleu, ax_loss), (pair, runs) in zip(axes, groups.items(), strict=True):
        for i, (path, label) in enumerate(runs):
            plot_run(ax_bleu, ax_loss, path, label, f"C{i % 10}")
        ax_bleu.set(ylabel="validation BLEU", title=f"{pair}: validation BLEU (greedy, sacreBLEU)")
        ax_loss.set(ylabel="label-smoothed loss")
        ax_loss.set_title(f"{pair}: loss (solid: train, dashed: valid)")
        ax_bleu.legend(fontsize=8, loc="lower right", ncol=2 if len(runs) > 4 else 1)
        for ax in (ax_bleu, ax_loss):
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("update")
    save(fig, Path(png))
    print(f"wrote {png}")


def plot_run(ax_bleu, ax_loss, path: str, label: str, color: str) -> None:
    """One run's validation BLEU on ax_bleu, its train (solid) and valid (dashed) loss on
    ax_loss."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    valid = [r for r in rows if r["valid_bleu"]]
    ax_bleu.plot([int(r["step"]) for r in valid], [float(r["valid_bleu"]) for r in valid],
                 marker=".", ms=3, color=color, label=label)
    train = [r for r in rows if r["train_loss"]]
    ax_loss.plot([int(r["step"]) for r in train], [float(r["train_loss"]) for r in train],
                 color=color)
    ax_loss.plot([int(r["step"]) for r in valid], [float(r["valid_loss"]) for r in valid], "--",
                 color=color)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", nargs="?", choices=sorted(RESULTS))
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--runs", default="runs/quality", help="where the runs live (default: runs/quality)")
    p.add_argument("--plot", nargs="+", metavar=("PNG", "LOG_CSV"), help="plot learning curves and exit")
    p.add_argument("--no-train", action="store_true", help="average and evaluate the run as it is")
    p.add_argument("--window", choices=("last", "best"), default="last",
                   help="average the last checkpoints (default) or the consecutive ones with the best mean "
                   "validation score (`qkv average --best`; `--keep_checkpoints N` keeps more of the run)")
    p.add_argument("--average", type=int, metavar="N", help="average N checkpoints instead of the result's own "
                   "number (5; the recipes keep 10)")
    p.add_argument("--alphas", default="0.6,1.0,1.5", help="length penalties to try on the validation split, "
                   "comma-separated; the best decodes the test split (default: 0.6,1.0,1.5; one value: no search)")
    args, extra = p.parse_known_args()  # extra --key value pairs go to `qkv train`
    if args.plot:
        plot(args.plot[0], args.plot[1:])
        return 0
    if args.result is None:
        p.error("name a result: " + ", ".join(sorted(RESULTS)))
    if args.average is not None and args.average < 1:
        p.error(f"--average must be at least 1, got {args.average}")
    alphas = tuple(float(a) for a in args.alphas.split(","))
    run_result(args.result, args.data_dir, Path(args.runs), extra, train=not args.no_train, alphas=alphas,
               window=args.window, average=args.average)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
