"""A trained model translating a real test set: qkv against CTranslate2 on the same weights, lines/s
and BLEU, each engine in the layouts of two cores it offers.

    python -m benchmarks.investigations.real_text_ct2 --model M \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz \\
        --ref ../shared/data/multi30k/test_2016_flickr.de.gz

Unlike `speed.py` (a random base-shape model, every output forced to 30 tokens), outputs end where
the model says and each engine batches as its users would: qkv's `Translator` with its default
batching, CTranslate2's `translate_batch` with 4,096-token batches. The model is exported with
`qkv export ctranslate2 --quantization int8`; CTranslate2 gets the same alpha (its length penalty
divides by length ** alpha, GNMT's by ((5 + length) / 6) ** alpha) and is told never to generate
what qkv never generates. The time is the median of --repeats warm passes (after
one that compiles a captured step or warms the caches); run it alone on the machine. Start it with
tcmalloc preloaded (`LD_PRELOAD=libtcmalloc_minimal.so.4`), as qkv's commands run on the CPU.
Needs `pip install -e '.[interop]'`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import common

QKV_ROWS = [  # (label, RuntimeOptions fields): two cores each
    ("int8 captured, 2 workers", dict(quantize="int8", capture=True, workers=2)),
    ("int8 captured, 2 threads", dict(quantize="int8", capture=True, threads=2)),
    ("int8, 2 workers", dict(quantize="int8", workers=2)),
]
CT2_ROWS = [("int8, 2 × 1 threads", 2, 1), ("int8, 1 × 2 threads", 1, 2)]


def timed(run: Callable[[], list[str]], repeats: int) -> tuple[float, list[str]]:
    """Median seconds of `repeats` calls after a first one, and the last call's output."""
    out = run()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out


Report = Callable[[str, str, int, float, list[str]], None]  # engine, setting, beam, seconds, out


def qkv_rows(args: argparse.Namespace, lines: list[str], report: Report) -> Any:
    """Time qkv's `Translator` in each of QKV_ROWS' settings; its tokenizer."""
    from qkv.apps.translator import Translator
    from qkv.decode.options import DecodeOptions
    from qkv.runtime.runtime_options import RuntimeOptions

    tokenizer = None
    for label, fields in QKV_ROWS:
        torch.set_num_threads(fields.get("threads", 1))
        translator = Translator.load(args.model, RuntimeOptions(**fields))
        tokenizer = translator.tokenizer
        for beam in args.beam:
            options = DecodeOptions(beam=beam, alpha=args.alpha)
            seconds, out = timed(
                lambda o=options, t=translator: t.translate(lines, o), args.repeats
            )
            report("qkv", label, beam, seconds, out)
        translator.close()
    return tokenizer


def ct2_rows(args: argparse.Namespace, lines: list[str], tokenizer: Any, report: Report) -> None:
    """Time CTranslate2 on the model exported with int8 weights, in each of CT2_ROWS' layouts."""
    import ctranslate2

    from qkv.interop.ctranslate2 import export_ctranslate2, never_generated
    from qkv.modeldir import load_model_dir

    source = [[tokenizer.src_vocabulary()[i] for i in ids] for ids in tokenizer.encode_src(lines)]
    pieces = {p: i for i, p in enumerate(tokenizer.tgt_vocabulary())}
    never = never_generated(load_model_dir(args.model), tokenizer)
    out_dir = export_ctranslate2(
        args.model, Path(tempfile.mkdtemp(prefix="qkv-ct2-")) / "int8", quantization="int8"
    )
    for label, inter, intra in CT2_ROWS:
        ct2 = ctranslate2.Translator(
            str(out_dir),
            device="cpu",
            compute_type="int8",
            inter_threads=inter,
            intra_threads=intra,
        )
        for beam in args.beam:

            def run(beam: int = beam, ct2: ctranslate2.Translator = ct2) -> list[str]:
                results = ct2.translate_batch(
                    source,
                    beam_size=beam,
                    length_penalty=args.alpha,
                    max_batch_size=4096,
                    batch_type="tokens",
                    max_decoding_length=256,
                    suppress_sequences=never,
                )
                ids = [[pieces[p] for p in r.hypotheses[0]] for r in results]
                return tokenizer.decode_tgt(ids)

            seconds, out = timed(run, args.repeats)
            report("CTranslate2", label, beam, seconds, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model directory (qkv's format)")
    parser.add_argument("--src", required=True, help="sources, one per line (.gz read as gzip)")
    parser.add_argument("--ref", help="references, for BLEU (sacreBLEU's default)")
    parser.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import sacrebleu

    from qkv.data.corpus import read_lines

    lines = read_lines(args.src)
    refs = read_lines(args.ref) if args.ref else None
    print(common.describe(common.machine(), common.versions("torch", "ctranslate2")))
    print(f"{len(lines)} sentences of {args.src}; lines/s, median of {args.repeats} warm passes")

    def report(engine: str, label: str, beam: int, seconds: float, out: list[str]) -> None:
        bleu = f"{sacrebleu.corpus_bleu(out, [refs]).score:.2f}" if refs else "-"
        print(f"| {engine} | {label} | {beam} | {len(lines) / seconds:,.0f} | {bleu} |", flush=True)

    print("\n| engine | setting | beam | lines/s | BLEU |\n|---|---|--:|--:|--:|")
    tokenizer = qkv_rows(args, lines, report)
    ct2_rows(args, lines, tokenizer, report)


if __name__ == "__main__":
    main()
