"""The demo model in CTranslate2 with int8 weights: does it keep the demo's exact match?

    python -m benchmarks.investigations.ct2_demo                   # trains the demo first (~75 s)
    python -m benchmarks.investigations.ct2_demo --model qkv-demo  # a directory `qkv demo` wrote

Exports the demo model with `qkv export ctranslate2 --quantization int8`, translates the demo's
test numbers (every 1- and 2-digit number, and held-out numbers of 3 to 6 digits) greedily with qkv
(float32) and with CTranslate2 (int8 weights), and prints each one's exact match, overall and on
the held-out numbers, and how often the two outputs agree. Writes the numbers to
benchmarks/results/ct2_demo.json (needs `pip install -e '.[interop]'`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any


def demo_test(n_test: int) -> Any:
    """The demo's test split (`qkv demo`'s seed and sizes, `n_test` held-out numbers)."""
    from qkv.apps.demo import demo_config
    from qkv.data.synthetic import synthetic_splits

    cfg = demo_config()
    _, _, test = synthetic_splits(
        cfg.seed,
        cfg.synthetic_train,
        cfg.synthetic_valid,
        n_test,
        target=cfg.synthetic_target,
        max_value=cfg.synthetic_max_value,
    )
    return test


def ct2_translate(
    model_dir: Path, translator: Any, sources: list[str], work: Path
) -> tuple[list[str], float]:
    """`sources` greedily through the model exported to CTranslate2 with int8 weights, and the
    seconds that translating took (the export not counted)."""
    import ctranslate2

    from qkv.interop.ctranslate2 import export_ctranslate2, never_generated
    from qkv.modeldir import load_model_dir

    out = export_ctranslate2(model_dir, work / "ct2-int8", quantization="int8")
    never = never_generated(load_model_dir(model_dir), translator.tokenizer)
    tokenizer = translator.tokenizer
    ct2 = ctranslate2.Translator(str(out), device="cpu", compute_type="int8")
    pieces = tokenizer.tgt_vocabulary()
    source = [[tokenizer.src_vocabulary()[i] for i in ids] for ids in tokenizer.encode_src(sources)]
    start = time.perf_counter()
    results = ct2.translate_batch(
        source, beam_size=1, max_decoding_length=256, suppress_sequences=never
    )
    seconds = time.perf_counter() - start
    ids = [[pieces.index(p) for p in r.hypotheses[0]] for r in results]
    return tokenizer.decode_tgt(ids), seconds


def agreement(test: Any, ours: list[str], theirs: list[str]) -> dict[str, Any]:
    """Each engine's exact match (overall, held out, by digit count) and how often they agree."""
    digits = [len(s.replace(" ", "")) for s in test.src]
    held_out = [i for i, k in enumerate(digits) if k >= 3]

    def exact(hyps: list[str], rows: list[int]) -> float:
        return sum(hyps[i] == test.tgt[i] for i in rows) / len(rows)

    everything = list(range(len(test.src)))
    by_digits = {k: [i for i, d in enumerate(digits) if d == k] for k in sorted(set(digits))}
    return {
        "test_numbers": len(everything),
        "held_out_numbers": len(held_out),
        "qkv_float32_exact_match": exact(ours, everything),
        "qkv_float32_held_out_exact_match": exact(ours, held_out),
        "ct2_int8_exact_match": exact(theirs, everything),
        "ct2_int8_held_out_exact_match": exact(theirs, held_out),
        "same_output": sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(ours),
        "by_digits": {  # digit count -> (qkv float32, CTranslate2 int8) exact match
            k: [round(exact(ours, rows), 4), round(exact(theirs, rows), 4)]
            for k, rows in by_digits.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the demo's model directory (default: train one)")
    parser.add_argument("--n-test", type=int, default=500, help="held-out numbers (as qkv demo)")
    results = Path(__file__).resolve().parents[1] / "results"  # benchmarks/results
    parser.add_argument("--json", default=str(results / "ct2_demo.json"))
    args = parser.parse_args()

    import ctranslate2

    from qkv.apps.demo import run_demo
    from qkv.apps.translator import Translator
    from qkv.decode.options import DecodeOptions

    work = Path(tempfile.mkdtemp(prefix="qkv-ct2-demo-"))
    model_dir = Path(args.model) if args.model else work / "demo"
    if args.model is None:
        print(f"training the demo into {model_dir} ...")
        run_demo(model_dir, n_test=args.n_test)
    test = demo_test(args.n_test)
    translator = Translator.load(model_dir)
    start = time.perf_counter()
    ours = translator.translate(test.src, DecodeOptions(beam=1))
    qkv_seconds = time.perf_counter() - start
    theirs, ct2_seconds = ct2_translate(model_dir, translator, test.src, work)
    numbers = {
        **agreement(test, ours, theirs),
        "qkv_seconds": round(qkv_seconds, 2),
        "ct2_int8_seconds": round(ct2_seconds, 2),
        "ctranslate2": ctranslate2.__version__,
    }
    for key, value in numbers.items():
        print(f"{key:34} {value:.4f}" if isinstance(value, float) else f"{key:34} {value}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(numbers, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
