"""The correctness check speed.py runs before any timing: qkv computes what Hugging Face computes
(logits and greedy ids) on the base-shape model and on the OPUS-MT-shaped one, and CTranslate2's
float32 greedy ids are counted against Hugging Face's. A failed check stops the run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import BOS
from benchmarks.speed_engines import OPUS_EOS, ct2_engine, hf_engine, load_sources, qkv_engine


def same(a: list[list[int]], b: list[list[int]]) -> int:
    """How many sentences have the same ids in a and in b."""
    return sum(x == y for x, y in zip(a, b, strict=True))


def logits_differences(work: Path, sources: list[list[int]]) -> tuple[float, float]:
    """max |qkv - HF| of the logits (teacher forcing on the first 8 sources), with nn.Linear and
    with packed weights."""
    import torch
    from transformers import MarianMTModel

    from qkv.modeldir import load_model_dir
    from qkv.runtime.packed import pack_linear_weights

    src = torch.tensor(sources[:8])
    tgt = torch.cat([torch.full((8, 1), BOS), src[:, :-1]], dim=1)  # any target ids will do
    with torch.inference_mode():
        hf = MarianMTModel.from_pretrained(work / "hf").eval()
        hf_logits = hf(input_ids=src, decoder_input_ids=tgt).logits
        del hf
        plain = load_model_dir(work / "qkv")
        logits_diff = (plain(src, tgt) - hf_logits).abs().max().item()
        packed_diff = (pack_linear_weights(plain)(src, tgt) - hf_logits).abs().max().item()
    return logits_diff, packed_diff


def check(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """qkv == HF: logits (teacher forcing, 1e-4; nn.Linear and packed weights) and greedy ids
    (packed, the default; with `--cache-off` also without the decoder cache) on the benchmark
    sources, for both models. CT2 float32 reported."""
    sources = load_sources(work, args.batch32_sentences)
    logits_diff, packed_diff = logits_differences(work, sources)
    ours = qkv_engine(work, 1, 0, args.new_tokens)(sources, 32)
    theirs = hf_engine(work, 1, 0, args.new_tokens)(sources, 32)
    ct2 = ct2_engine(work, 1, 0, args.new_tokens, args.vocab, "float32", 1, 0)(sources, 32)
    result = {
        "logits_max_abs_diff": logits_diff,
        "packed_logits_max_abs_diff": packed_diff,
        "sentences": len(sources),
        "qkv_equals_hf": same(ours, theirs),
        "ct2_float32_equals_hf": same(ct2, theirs),
        "ended_with_eos": sum(len(o) < args.new_tokens for o in theirs),
    }
    opus_sources = load_sources(work, args.batch32_sentences, OPUS_EOS)
    opus_ours = qkv_engine(work, 1, 0, args.new_tokens, model="opus-qkv")(opus_sources, 32)
    opus_theirs = hf_engine(work, 1, 0, args.new_tokens, model="opus-hf")(opus_sources, 32)
    result["opus_qkv_equals_hf"] = same(opus_ours, opus_theirs)
    if result["opus_qkv_equals_hf"] != len(sources):
        raise SystemExit(
            "check failed: qkv differs from Hugging Face on the OPUS-MT-shaped model; "
            "no timing done"
        )
    if args.cache_off:
        uncached = qkv_engine(work, 1, 0, args.new_tokens, use_cache=False)(sources, 32)
        result["qkv_cache_off_equals_hf"] = same(uncached, theirs)
        if result["qkv_cache_off_equals_hf"] != len(sources):
            raise SystemExit(
                "check failed: qkv without the decoder cache differs from Hugging "
                "Face; no timing done"
            )
    print(
        check_line(result, f"{logits_diff:.2e} (packed {packed_diff:.2e})"),
        file=sys.stderr,
        flush=True,
    )
    if max(logits_diff, packed_diff) > 1e-4 or result["qkv_equals_hf"] != len(sources):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if a != b:
                print(f"sentence {i}:\n  qkv {a}\n  hf  {b}", file=sys.stderr)
        raise SystemExit(
            "check failed: qkv does not compute what Hugging Face computes; no timing done"
        )
    return result


def check_line(result: dict[str, Any], logits: str, packed: str = "") -> str:
    """The check's one-line summary; `logits` states the logits' differences."""
    n = result["sentences"]
    return (
        f"check: logits max |qkv - HF| = {logits}; greedy ids qkv{packed} == HF on "
        f"{result['qkv_equals_hf']}/{n} sentences; CT2 float32 == HF on "
        f"{result['ct2_float32_equals_hf']}/{n}; OPUS-MT shape qkv == HF on "
        f"{result['opus_qkv_equals_hf']}/{n}"
    )
