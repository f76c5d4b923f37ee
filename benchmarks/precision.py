"""bf16 against fp32 in qkv, on the CPU: decoding and training speed, side by side.

    python -m benchmarks.precision                # the bf16 table of docs/benchmarks.md
    python -m benchmarks.precision --quick        # smoke run of every row (tiny workloads)
    python -m benchmarks.precision --json benchmarks/results/precision.json

The output opens with the machine (CPU model, the CPU flags that select kernels: avx512_bf16 and
amx_bf16 mean native bf16), what `--precision auto` resolves to here, and the versions.

Decoding: a random qkv model of the paper's base shape (`common.base_model`: 6 + 6 layers,
d_model 512, 8 heads, 8k shared vocabulary), prepared as `Translator.load` prepares it
(`prepare_for_decoding`: packed weights, decoding attention) once with fp32 weights and once with
bf16 weights. Greedy and beam 4, batch 1 (`--batch1-sentences`, one at a time) and batch 32
(`--batch32-sentences`); sources of `common.SRC_LEN` random tokens + eos, every hypothesis forced
to exactly `--new-tokens` tokens (as benchmarks/speed.py does, so that its CTranslate2 rows of the
same run compare). Each bf16 row states its ratio to the fp32 row, and how many of its greedy
outputs equal fp32's (a random model has near ties; trained models: tests/runtime/test_precision.py).

Training: forward + label-smoothed loss + backward + Adam (+ clipping) as `qkv train` runs it
(`TranslationLoss`, bf16 autocast around forward and loss, fp32 master weights, the CPU swaps of
`qkv.runtime.training`), on fixed random
batches of two shapes: multi30k-wide (3 + 3 layers, d_model 256, d_ff 1024, 4 heads, pre-norm,
10k vocabulary, batches of 8,192 padded tokens of 14-token sentences) and the paper's base shape
(6 + 6, d_model 512, 8k vocabulary, 4,096-token batches of 25-token sentences). Target tokens/s,
fp32 and bf16, and the ratio.

Each time is the median of `--repeats` runs after a warm-up (`common.timed`); "others' cores" is the
CPU other processes used meanwhile: a number above ~0.1 means the row was disturbed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
from pathlib import Path
from typing import Any

import torch

from benchmarks import common
from benchmarks.common import BOS, timed
from qkv import Transformer
from qkv.decode.search import beam_search, greedy
from qkv.runtime.precision import describe_hardware, resolve_precision
from qkv.runtime.prepare import prepare_for_decoding
from qkv.runtime.runtime_options import RuntimeOptions
from qkv.runtime.training import prepare_for_training
from qkv.train.loss import TranslationLoss

# name -> (config overrides of common.base_config, vocabulary, padded tokens a batch, sentence tokens)
TRAIN_SHAPES: dict[str, tuple[dict[str, Any], int, int, int]] = {
    "multi30k-wide": (
        dict(d_model=256, d_ff=1024, n_heads=4, n_encoder_layers=3, n_decoder_layers=3,
             norm_first=True, dropout=0.3, attention_dropout=0.0, activation_dropout=0.0),
        10_000, 8192, 14,
    ),
    "base": (dict(dropout=0.1), common.VOCAB, 4096, 25),
}


def decode_all(model: Transformer, sources: torch.Tensor, batch: int, beam: int, new_tokens: int
               ) -> list[list[int]]:
    """The best hypothesis of every source, decoded `batch` sources at a time, each new_tokens long."""
    out = []
    for i in range(0, len(sources), batch):
        src = sources[i : i + batch]
        if beam == 1:
            out += [h.tokens for h in greedy(model, src, min_len=new_tokens, max_len=new_tokens)]
        else:
            nbest = beam_search(model, src, beam=beam, min_len=new_tokens, max_len=new_tokens)
            out += [hyps[0].tokens for hyps in nbest]
    return out


def train_step(loss_module: TranslationLoss, optimizer: torch.optim.Optimizer, precision: str,
               src: torch.Tensor, tgt_in: torch.Tensor, labels: torch.Tensor) -> float:
    """One update as `qkv train` makes it: bf16 autocast around forward and loss (precision bf16)."""
    optimizer.zero_grad(set_to_none=True)
    bf16 = precision == "bf16"
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        loss, _ = loss_module(src, tgt_in, labels)
    (loss / labels.numel()).backward()
    torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def decode_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    model = common.base_model(args.vocab)
    models = {
        p: prepare_for_decoding(copy.deepcopy(model), RuntimeOptions(precision=p))
        for p in ("fp32", "bf16")
    }
    n = max(args.batch1_sentences, args.batch32_sentences)
    sources = common.random_sentences(n, common.SRC_LEN, args.vocab, seed=1)  # (n, S)
    rows = []
    for beam in (1, 4):
        for batch, count in ((1, args.batch1_sentences), (32, args.batch32_sentences)):
            outputs = {}
            for precision, m in models.items():
                run = functools.partial(decode_all, m, sources[:count], batch, beam, args.new_tokens)
                with torch.inference_mode():
                    times, outputs[precision] = timed(run, args.repeats)
                rows.append({"task": "decode", "precision": precision, "beam": beam, "batch": batch,
                             **times, "tokens_per_second": count * args.new_tokens / times["seconds"]})
            same = sum(a == b for a, b in zip(outputs["fp32"], outputs["bf16"], strict=True))
            rows[-1]["same_as_fp32"] = same / count
            rows[-1]["ratio"] = rows[-1]["tokens_per_second"] / rows[-2]["tokens_per_second"]
            print(f"  decode beam {beam} batch {batch}: {rows[-1]['ratio']:.2f}x", flush=True)
    return rows


def train_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name, (overrides, vocab, batch_tokens, length) in TRAIN_SHAPES.items():
        if args.quick:
            overrides = {**overrides, "n_encoder_layers": 1, "n_decoder_layers": 1}
            batch_tokens //= 8
        B = batch_tokens // length
        src = common.random_sentences(B, length - 1, vocab, seed=2)  # (B, length), eos last
        labels = common.random_sentences(B, length - 1, vocab, seed=3)
        tgt_in = torch.cat([torch.full((B, 1), BOS), labels[:, :-1]], dim=1)
        for precision in ("fp32", "bf16"):
            torch.manual_seed(0)
            model = Transformer(common.base_config(vocab, **overrides)).train()
            prepare_for_training(model, precision, torch.device("cpu"))  # as `qkv train` does
            loss_module = TranslationLoss(model, label_smoothing=0.1)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
            step = functools.partial(train_step, loss_module, optimizer, precision, src, tgt_in, labels)
            times, loss = timed(step, args.repeats)
            rows.append({"task": "train", "shape": name, "precision": precision, **times,
                         "target_tokens": labels.numel(), "loss": loss / labels.numel(),
                         "tokens_per_second": labels.numel() / times["seconds"]})
        rows[-1]["ratio"] = rows[-1]["tokens_per_second"] / rows[-2]["tokens_per_second"]
        print(f"  train {name}: {rows[-1]['ratio']:.2f}x", flush=True)
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|",
                      *(line(r) for r in rows)])


def tables(rows: list[dict[str, Any]]) -> str:
    decode = [[str(r["beam"]) if r["beam"] > 1 else "greedy", str(r["batch"]), r["precision"],
               f"{r['tokens_per_second']:,.0f}", f"{r['ratio']:.2f}x" if "ratio" in r else "",
               f"{r['same_as_fp32']:.0%}" if "same_as_fp32" in r else "", f"{r['other_cores']:.2f}"]
              for r in rows if r["task"] == "decode"]
    train = [[r["shape"], r["precision"], f"{r['tokens_per_second']:,.0f}",
              f"{r['ratio']:.2f}x" if "ratio" in r else "", f"{r['loss']:.3f}", f"{r['other_cores']:.2f}"]
             for r in rows if r["task"] == "train"]
    return (markdown(["search", "batch", "precision", "tokens/s", "vs fp32", "same as fp32",
                            "others' cores"], decode)
            + "\n\n" + markdown(["training shape", "precision", "target tokens/s", "vs fp32",
                                       "loss (last step)", "others' cores"], train))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny workloads: a smoke run of every row")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--vocab", type=int, default=common.VOCAB)
    parser.add_argument("--new-tokens", type=int, default=common.NEW_TOKENS)
    parser.add_argument("--batch1-sentences", type=int, default=common.BATCH1_SENTENCES)
    parser.add_argument("--batch32-sentences", type=int, default=common.BATCH32_SENTENCES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.quick:
        args.vocab, args.new_tokens, args.repeats = 1000, 4, 1
        args.batch1_sentences, args.batch32_sentences = 2, 32
    if args.threads:
        torch.set_num_threads(args.threads)
    host, software = common.machine(), common.versions("torch")
    print(common.describe(host, software))
    print(f"precision auto here: {resolve_precision('auto', 'cpu')} ({describe_hardware('cpu')}); "
          f"{torch.get_num_threads()} threads")
    rows = decode_rows(args) + train_rows(args)
    print(tables(rows))
    if args.json:
        out = {"machine": host, "versions": software, "threads": torch.get_num_threads(),
               "quick": args.quick, "rows": rows}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
