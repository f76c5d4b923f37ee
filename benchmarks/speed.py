"""Speed of qkv against Hugging Face transformers and CTranslate2 on the paper's base shape, on CPU.

    pip install -e '.[bench]'
    python benchmarks/speed.py                 # the table of docs/benchmarks.md
    python benchmarks/speed.py --quick         # smoke run of every path
    python benchmarks/speed.py --cache-off     # also qkv greedy without the decoder cache
    python benchmarks/speed.py --json benchmarks/results/speed.json

The output opens with the machine (CPU model, the CPU flags that select kernels, cores) and the
versions.

One random model, three engines. A Hugging Face `MarianMTModel` of the base shape (6 + 6 layers,
d_model 512, d_ff 2048, 8 heads, ReLU, post-norm, sinusoidal positions, a shared and tied
8,000-token vocabulary; `common.marian_config`) is built with random weights, imported into qkv with
`qkv.interop.marian.from_marian`, and converted to CTranslate2 with
`ctranslate2.converters.TransformersConverter` (float32 and int8). Ids: unk 1, decoder start (bos)
2, eos 3, and pad last (8k - 1), where Marian has it: CTranslate2's Marian converter drops the last
row as the pad. The bos row is zeroed, so that the three compute the same function (CTranslate2
starts Marian decoders from a zero embedding).

A second random model has OPUS-MT's shape and conventions (`opus_config`: the same sizes with the
swish activation, eos 0, pad = decoder start = the last id, and a non-zero final_logits_bias); it is
imported into qkv the way `qkv convert marian` imports a checkpoint, and its row pair ("qkv OPUS-MT",
"HF transformers OPUS-MT") times qkv decoding the imported model against Hugging Face `generate` on
the same model, greedy and beam 4, batch 1 and 32.

Before any timing the harness checks correctness and exits 1 if it fails: on the benchmark sources,
qkv's logits equal Hugging Face's (1e-4, with nn.Linear and with packed weights) and qkv's greedy
ids (packed weights, the default; with `--cache-off` also without the decoder cache; and those of the
OPUS-MT-shaped model) equal `generate`'s token for token (both decoding freely to eos or `--new-tokens`). CTranslate2 float32's
agreement with Hugging Face is reported, not required.

Timed, each engine and setting in a fresh subprocess (so that the peak RSS is its own):
* decoding: greedy and beam 4, batch 1 (`--batch1-sentences` sentences, one at a time) and batch 32
  (`--batch32-sentences` in batches of 32); sources of `--src-len` random tokens + eos; every
  hypothesis is forced to exactly `--new-tokens` tokens (qkv min_len = max_len, HF min_new_tokens =
  max_new_tokens, CT2 min/max_decoding_length), so the work does not depend on when a random model
  would stop. tokens/s counts the returned hypotheses' tokens (eos excluded; a beam of 4 computes 4
  times as many). qkv also runs one more decoder step to score the forced eos. CTranslate2 runs with
  its default threads and with (inter_threads, intra_threads) = (2, 1); it receives all sentences of
  a run at once with max_batch_size = the batch, so inter_threads = 2 decodes two batches in
  parallel (its throughput mode). qkv runs both ways too: "qkv" uses torch's threads on one batch at
  a time, "qkv 2x1" decodes two batches at once on two worker threads with one torch thread each,
  "qkv 2x1 processes" in two worker processes of one torch thread each, forked once before the timed
  runs (`qkv.runtime.workers.ForkedWorkers`; what `--workers 2` in `qkv translate` runs on a CPU where
  the system forks, kept by the `Translator` from call to call). "qkv" rows use packed weights
  (`qkv.runtime.packed`, what `Translator.load` does on the CPU); "qkv unpacked" uses nn.Linear.
  On a CPU that multiplies bf16 natively (AVX512_BF16 or AMX, detected at run time; the line after
  the machine says), "qkv bf16" (bf16 packed weights, `--precision bf16`), "qkv 2x1 bf16" and
  "HF transformers bf16" (the model cast to bf16) rows are added. With `--cache-off`, "qkv cache
  off" rows (greedy) recompute the whole prefix at every step (the reference the decoder cache must
  match): they show what the cache saves.
* training: forward + backward + Adam step on `--train-sentences` pairs (25 target tokens each),
  float32, dropout 0.1, qkv vs Hugging Face: target tokens/s, and achieved GFLOP/s (matmul FLOPs
  counted from the shapes, backward = 2 x forward) as a fraction of the machine's fp32 matmul peak,
  measured with torch.matmul on `--matmul-size` square matrices with the same threads. Each engine
  runs twice: as is, and with glibc told to keep freed memory
  (`qkv.runtime.process.keep_freed_memory`, which `qkv train` does on the CPU; it helps any PyTorch
  training loop, HF's too). qkv's rows apply the CPU swaps `qkv train` applies
  (`qkv.runtime.training`). With native bf16, both engines also train with bf16 autocast (fp32
  master weights and Adam state, as `qkv train --precision bf16` does); Hugging Face both with its
  default sdpa attention and with eager attention (faster in bf16 at these lengths).
* attention: one encoder self-attention layer (d_model 512, 8 heads, batch 1) at sequence lengths
  128 .. 4096: time and peak memory (RSS high-water mark above the one before the call) of qkv's
  fused path (F.scaled_dot_product_attention) and of the explicit softmax(QK^T)V path
  (`need_weights=True`).
Each time is the median of `--repeats` runs after one warm-up run (the best run is reported too;
`common.timed`). Other processes on the machine make timings noisy: "others' cores" is the CPU they
used while a row was timed (machine-wide busy time from /proc/stat minus the worker's own, per
second), and the load average before and after is recorded.

After the decoding table, a second one takes each engine's best row per workload (qkv float32,
bf16 and int8, each over its thread layouts; Hugging Face over float32 and bf16; CTranslate2
float32 and int8) and states its ratio to each peer's best row: the comparison the targets of
docs/benchmarks.md are stated in.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import common  # benchmarks/common.py (the script's folder is on sys.path)
from common import BOS, D_FF, D_MODEL, EOS, HEADS, LAYERS, UNK, marian_config, memory_mb, timed

CT2_THREADS = [("default", 1, 0), ("2x1", 2, 1)]  # (label, inter_threads, intra_threads)
WORKERS = [(1, False), (2, False), (2, True)]  # qkv: (workers, processes)
ATTENTION_LENGTHS = [128, 256, 512, 1024, 2048, 4096]
OPUS_EOS = 0  # OPUS-MT's eos; its pad and decoder start are the last id
ENV = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
       "HF_HUB_OFFLINE": "1"}


# --- the shared setup: the model in three formats and the sources ------------------------------------------------

def token(i: int, vocab: int) -> str:
    """The vocabulary's i-th token string (CTranslate2 reads tokens, qkv and HF ids)."""
    return "<pad>" if i == vocab - 1 else {UNK: "<unk>", BOS: "<s>", EOS: "</s>"}.get(i, f"w{i}")


def opus_config(vocab: int) -> Any:
    """The base shape as OPUS-MT configures it: swish, eos 0, pad = decoder start = the last id."""
    config = marian_config(vocab)
    config.activation_function = "swish"
    config.eos_token_id, config.pad_token_id, config.decoder_start_token_id = OPUS_EOS, vocab - 1, vocab - 1
    return config


def build(work: Path, args: argparse.Namespace) -> None:
    """Write work/{hf, qkv, ct2-float32, ct2-int8, opus-hf, opus-qkv} and work/sources.json (N, src_len + 1) ids
    ending with eos."""
    import torch
    from ctranslate2.converters import TransformersConverter
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MarianMTModel, PreTrainedTokenizerFast

    from qkv.interop.marian import from_marian
    from qkv.modeldir import save_model_dir

    torch.manual_seed(0)
    hf = MarianMTModel(marian_config(args.vocab)).eval()
    with torch.no_grad():
        hf.model.shared.weight[BOS].zero_()  # start from a zero embedding, as CTranslate2 does for Marian
    hf.save_pretrained(work / "hf")
    words = Tokenizer(models.WordLevel({token(i, args.vocab): i for i in range(args.vocab)}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(work / "hf")
    save_model_dir(work / "qkv", from_marian(hf, unk_id=UNK))
    opus = MarianMTModel(opus_config(args.vocab)).eval()
    with torch.no_grad():
        opus.final_logits_bias.normal_(0.0, 0.1)  # OPUS-MT's bias is not zero
    opus.save_pretrained(work / "opus-hf")
    save_model_dir(work / "opus-qkv", from_marian(opus, unk_id=UNK))
    for quantization in ("float32", "int8"):
        TransformersConverter(str(work / "hf")).convert(str(work / f"ct2-{quantization}"),
                                                        quantization=quantization, force=True)
    n = max(args.batch1_sentences, args.batch32_sentences)
    src = common.random_sentences(n, args.src_len, args.vocab, seed=1)
    (work / "sources.json").write_text(json.dumps(src.tolist()))


def load_sources(work: Path, n: int, eos: int = EOS) -> list[list[int]]:
    return [[*s[:-1], eos] for s in json.loads((work / "sources.json").read_text())[:n]]


# --- the three engines: sources (ids) -> output tokens per sentence ------------------------------------------------

Translate = Callable[[list[list[int]], int], list[list[int]]]  # (sources, batch size) -> ids without eos


def qkv_engine(work: Path, beam: int, min_len: int, max_len: int, quantize: str | None = None,
               workers: int = 1, pack: bool | None = None, use_cache: bool = True, model: str = "qkv",
               precision: str = "fp32", processes: bool = False) -> Translate:
    import torch

    from qkv.decode.search import beam_search, greedy
    from qkv.modeldir import load_model_dir
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.workers import ForkedWorkers, map_in_workers

    model = prepare_for_decoding(load_model_dir(work / model), "cpu", quantize, pack,  # as Translator.load does
                                 precision=precision)

    def decode(src: torch.Tensor) -> list[list[int]]:
        if beam == 1:
            hyps = greedy(model, src, min_len=min_len, max_len=max_len, use_cache=use_cache)
            return [h.tokens for h in hyps]
        nbest = beam_search(model, src, beam=beam, min_len=min_len, max_len=max_len,
                            use_cache=use_cache)
        return [hyps[0].tokens for hyps in nbest]

    forked = ForkedWorkers(decode, workers) if processes and workers > 1 else None  # as Translator

    def translate(sources: list[list[int]], batch: int) -> list[list[int]]:
        batches = [torch.tensor(sources[i : i + batch]) for i in range(0, len(sources), batch)]
        if forked is not None and len(batches) > 1:
            return [tokens for out in forked.map(batches) for tokens in out]
        return [tokens for out in map_in_workers(decode, batches, workers) for tokens in out]

    return translate


def hf_engine(work: Path, beam: int, min_len: int, max_len: int, model: str = "hf",
              precision: str = "fp32") -> Translate:
    import torch
    from transformers import MarianMTModel

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = MarianMTModel.from_pretrained(work / model).to(dtype).eval()
    eos, never = model.config.eos_token_id, sorted({model.config.pad_token_id, model.config.decoder_start_token_id})

    def translate(sources: list[list[int]], batch: int) -> list[list[int]]:
        out = []
        for i in range(0, len(sources), batch):
            src = torch.tensor(sources[i : i + batch])
            with torch.inference_mode():
                ids = model.generate(input_ids=src, attention_mask=torch.ones_like(src), do_sample=False,
                                     num_beams=beam, min_new_tokens=min_len, max_new_tokens=max_len,
                                     suppress_tokens=never)
            for row in ids[:, 1:].tolist():  # drop the decoder start; cut at eos
                out.append(row[: row.index(eos)] if eos in row else row)
        return out

    return translate


def ct2_engine(work: Path, beam: int, min_len: int, max_len: int, vocab: int, compute_type: str, inter: int,
               intra: int) -> Translate:
    import ctranslate2

    translator = ctranslate2.Translator(str(work / f"ct2-{compute_type}"), device="cpu", compute_type=compute_type,
                                        inter_threads=inter, intra_threads=intra)
    ids = {token(i, vocab): i for i in range(vocab)}

    def translate(sources: list[list[int]], batch: int) -> list[list[int]]:
        results = translator.translate_batch([[token(i, vocab) for i in s] for s in sources], max_batch_size=batch,
                                             beam_size=beam, min_decoding_length=min_len,
                                             max_decoding_length=max_len, suppress_sequences=[["<s>"]])
        return [[ids[t] for t in r.hypotheses[0]] for r in results]

    return translate


def import_engine(engine: str) -> None:
    """Import what an engine needs (transformers loads its modules lazily: import the model class)."""
    if engine == "ct2":
        import ctranslate2  # noqa: F401
    elif engine == "hf":
        from transformers import MarianMTModel  # noqa: F401
    else:
        import qkv.decode.search  # noqa: F401


def make_engine(work: Path, spec: dict[str, Any], min_len: int, max_len: int) -> Translate:
    """The engine a worker spec names: "qkv", "hf" or "ct2" (with compute_type, inter, intra)."""
    opus = "opus-" if spec.get("model") == "opus" else ""
    if spec["engine"] == "qkv":
        return qkv_engine(work, spec["beam"], min_len, max_len, spec.get("quantize"),
                          spec.get("workers", 1), spec.get("pack"), spec.get("cache", True), opus + "qkv",
                          spec.get("precision", "fp32"), spec.get("processes", False))
    if spec["engine"] == "hf":
        return hf_engine(work, spec["beam"], min_len, max_len, opus + "hf", spec.get("precision", "fp32"))
    return ct2_engine(work, spec["beam"], min_len, max_len, spec["vocab"], spec["compute_type"], spec["inter"],
                      spec["intra"])


# --- measurements, each run by a worker subprocess ----------------------------------------------------------------

def measure_decoding(work: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Decode spec["sentences"] sources in batches of spec["batch"], every hypothesis exactly new_tokens long."""
    import_engine(spec["engine"])
    imports_mb = memory_mb("VmRSS")
    n, new_tokens = spec["sentences"], spec["new_tokens"]
    translate = make_engine(work, spec, new_tokens, new_tokens)
    sources = load_sources(work, n, OPUS_EOS if spec.get("model") == "opus" else EOS)
    times, out = timed(lambda: translate(sources, spec["batch"]), spec["repeats"])
    lengths = sorted({len(o) for o in out})
    if len(out) != n or lengths != [new_tokens]:
        raise RuntimeError(f"{spec}: expected {n} outputs of {new_tokens} tokens, got {len(out)} of lengths {lengths}")
    return {**times, "tokens_per_second": n * new_tokens / times["seconds"],
            "best_tokens_per_second": n * new_tokens / times["best_seconds"],
            "sentences_per_second": n / times["seconds"], "peak_rss_mb": memory_mb("VmHWM"),
            "imports_rss_mb": imports_mb}


def training_flops(vocab: int, batch: int, src_len: int, tgt_len: int) -> float:
    """Matmul FLOPs of one training step: 3 x forward (backward = 2 x forward), attention products included.

    Per layer, MACs per token: encoder 4 D^2 + 2 D F; decoder 6 D^2 + 2 D F, plus 2 D^2 per source token for the
    cross-attention keys/values; attention QK^T and AV: 2 D per (query, key) pair; output projection D V.
    """
    d, f, v = D_MODEL, D_FF, vocab
    S, T = src_len, tgt_len
    encoder = S * (4 * d * d + 2 * d * f) + 2 * S * S * d
    decoder = T * (6 * d * d + 2 * d * f) + S * 2 * d * d + 2 * T * T * d + 2 * T * S * d
    macs = batch * (LAYERS * encoder + LAYERS * decoder + T * d * v)
    return 3 * 2 * macs


def measure_training(work: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Forward + backward + Adam on one fixed batch: src (B, src_len + 1), tgt_in and labels (B, tgt_len)."""
    import torch
    import torch.nn.functional as F

    import_engine(spec["engine"])
    imports_mb = memory_mb("VmRSS")
    if spec.get("keep_freed_memory"):  # what `qkv train` does on the CPU
        from qkv.runtime.process import keep_freed_memory

        keep_freed_memory()
    torch.manual_seed(0)  # the dropout masks
    B, S, T = spec["sentences"], spec["src_len"] + 1, spec["tgt_len"]
    src = common.random_sentences(B, S - 1, spec["vocab"], seed=2)  # (B, S), eos last
    labels = common.random_sentences(B, T - 1, spec["vocab"], seed=3)  # (B, T), eos last
    tgt_in = torch.cat([torch.full((B, 1), BOS), labels[:, :-1]], dim=1)
    if spec["engine"] == "qkv":
        from qkv.modeldir import load_model_dir
        from qkv.runtime.training import prepare_for_training

        model = load_model_dir(work / "qkv")
        prepare_for_training(model, spec.get("precision", "fp32"), torch.device("cpu"))  # as `qkv train`

        def forward() -> torch.Tensor:
            return model(src, tgt_in)
    else:
        from transformers import MarianMTModel

        model = MarianMTModel.from_pretrained(work / "hf", attn_implementation=spec.get("attention", "sdpa"))

        def forward() -> torch.Tensor:
            return model(input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=tgt_in).logits
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    bf16 = spec.get("precision") == "bf16"  # autocast, fp32 master weights: what `qkv train` does

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(forward().flatten(0, 1).float(), labels.flatten())
        loss.backward()
        optimizer.step()
        return loss.item()

    times, _ = timed(step, spec["repeats"])
    flops = training_flops(spec["vocab"], B, S, T)
    return {**times, "target_tokens": B * T, "tokens_per_second": B * T / times["seconds"],
            "gflops_per_second": flops / times["seconds"] / 1e9,
            "best_gflops_per_second": flops / times["best_seconds"] / 1e9, "flops_per_step": flops,
            "peak_rss_mb": memory_mb("VmHWM"), "imports_rss_mb": imports_mb, "threads": torch.get_num_threads()}


def measure_matmul(spec: dict[str, Any]) -> dict[str, Any]:
    """fp32 matmul peak: the best of `repeats` (n x n) @ (n x n) products, after a warm-up."""
    import torch

    n = spec["size"]
    a, b = torch.randn(n, n), torch.randn(n, n)
    times, _ = timed(lambda: torch.matmul(a, b), spec["repeats"])
    return {**times, "gflops_per_second": 2 * n**3 / times["best_seconds"] / 1e9, "threads": torch.get_num_threads()}


def measure_attention(spec: dict[str, Any]) -> dict[str, Any]:
    """One encoder self-attention layer on (1, L, 512): extra peak memory of the first call, then median time."""
    import torch

    from qkv.model.attention import MultiHeadedAttention

    torch.manual_seed(0)
    layer = MultiHeadedAttention(D_MODEL, HEADS).eval()
    x = torch.randn(1, spec["length"], D_MODEL)
    with torch.inference_mode():
        before = memory_mb("VmHWM")
        out = layer(x, need_weights=spec["explicit"])
        extra_mb = memory_mb("VmHWM") - before
        del out
        times, _ = timed(lambda: layer(x, need_weights=spec["explicit"]), spec["repeats"])
    return {**times, "extra_peak_mb": extra_mb}


def worker(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    task = spec["task"]
    if task == "decode":
        return measure_decoding(work, spec)
    if task == "train":
        return measure_training(work, spec)
    if task == "matmul":
        return measure_matmul(spec)
    return measure_attention(spec)


def run_worker(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    """Run one measurement in a fresh Python process; exit 1 with its stderr if it fails."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec), "--workdir", str(work)],
                          capture_output=True, text=True, env=ENV)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        raise SystemExit(f"worker failed: {spec}")
    result = {**spec, **json.loads(lines[-1][len("RESULT "):]), "load_average": [load, os.getloadavg()[0]]}
    label = " ".join(f"{k}={v}" for k, v in spec.items() if k not in ("task", "vocab", "repeats"))
    print(f"  {spec['task']:<9} {label:<80} {time.perf_counter() - start:6.1f} s", file=sys.stderr, flush=True)
    return result


# --- correctness, before any timing ---------------------------------------------------------------------------------

def check(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """qkv == HF: logits (teacher forcing, 1e-4; nn.Linear and packed weights) and greedy ids (packed, the
    default; with `--cache-off` also without the decoder cache) on the benchmark sources. CT2 float32
    reported."""
    import torch
    from transformers import MarianMTModel

    from qkv.modeldir import load_model_dir
    from qkv.runtime.packed import pack_linear_weights

    sources = load_sources(work, args.batch32_sentences)
    src = torch.tensor(sources[:8])
    tgt = torch.cat([torch.full((8, 1), BOS), src[:, :-1]], dim=1)  # any target ids will do
    with torch.inference_mode():
        hf_logits = MarianMTModel.from_pretrained(work / "hf").eval()(input_ids=src, decoder_input_ids=tgt).logits
        plain = load_model_dir(work / "qkv")
        logits_diff = (plain(src, tgt) - hf_logits).abs().max().item()
        packed_diff = (pack_linear_weights(plain)(src, tgt) - hf_logits).abs().max().item()
    ours = qkv_engine(work, 1, 0, args.new_tokens)(sources, 32)
    theirs = hf_engine(work, 1, 0, args.new_tokens)(sources, 32)
    ct2 = ct2_engine(work, 1, 0, args.new_tokens, args.vocab, "float32", 1, 0)(sources, 32)
    result = {"logits_max_abs_diff": logits_diff, "packed_logits_max_abs_diff": packed_diff,
              "sentences": len(sources),
              "qkv_equals_hf": sum(a == b for a, b in zip(ours, theirs, strict=True)),
              "ct2_float32_equals_hf": sum(a == b for a, b in zip(ct2, theirs, strict=True)),
              "ended_with_eos": sum(len(o) < args.new_tokens for o in theirs)}
    opus_sources = load_sources(work, args.batch32_sentences, OPUS_EOS)
    opus_ours = qkv_engine(work, 1, 0, args.new_tokens, model="opus-qkv")(opus_sources, 32)
    opus_theirs = hf_engine(work, 1, 0, args.new_tokens, model="opus-hf")(opus_sources, 32)
    result["opus_qkv_equals_hf"] = sum(a == b for a, b in zip(opus_ours, opus_theirs, strict=True))
    if result["opus_qkv_equals_hf"] != len(sources):
        raise SystemExit("check failed: qkv differs from Hugging Face on the OPUS-MT-shaped model; no timing done")
    if args.cache_off:
        uncached = qkv_engine(work, 1, 0, args.new_tokens, use_cache=False)(sources, 32)
        result["qkv_cache_off_equals_hf"] = sum(a == b for a, b in zip(uncached, theirs, strict=True))
        if result["qkv_cache_off_equals_hf"] != len(sources):
            raise SystemExit("check failed: qkv without the decoder cache differs from Hugging Face; "
                             "no timing done")
    print(f"check: logits max |qkv - HF| = {logits_diff:.2e} (packed {packed_diff:.2e}); greedy ids qkv == HF on "
          f"{result['qkv_equals_hf']}/{len(sources)} sentences; CT2 float32 == HF on "
          f"{result['ct2_float32_equals_hf']}/{len(sources)}; OPUS-MT shape qkv == HF on "
          f"{result['opus_qkv_equals_hf']}/{len(sources)}",
          file=sys.stderr, flush=True)
    if max(logits_diff, packed_diff) > 1e-4 or result["qkv_equals_hf"] != len(sources):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if a != b:
                print(f"sentence {i}:\n  qkv {a}\n  hf  {b}", file=sys.stderr)
        raise SystemExit("check failed: qkv does not compute what Hugging Face computes; no timing done")
    return result


# --- the report -----------------------------------------------------------------------------------------------------

def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|",
                      *(line(r) for r in rows)])


def engine_name(r: dict[str, Any]) -> str:
    opus = " OPUS-MT" if r.get("model") == "opus" else ""
    if r["engine"] == "ct2":
        return f"CT2 {r['compute_type']} {r['threads_label']}"
    if r["engine"] == "qkv":
        return " ".join(["qkv", *(["unpacked"] if not r.get("pack", True) else []),
                         *([r["quantize"]] if r.get("quantize") else []),
                         *(["2x1"] if r.get("workers", 1) == 2 else []),
                         *(["processes"] if r.get("processes") else []),
                         *(["bf16"] if r.get("precision") == "bf16" else []),
                         *(["cache off"] if not r.get("cache", True) else [])]) + opus
    return ("HF transformers" + (" bf16" if r.get("precision") == "bf16" else "")
            + (f" {r['attention']}" if r.get("attention") else "") + opus)


def decode_table(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        plain = "qkv OPUS-MT" if r.get("model") == "opus" else "qkv"  # the same model's plain qkv row
        base = next(q for q in rows if engine_name(q) == plain and q["beam"] == r["beam"] and q["batch"] == r["batch"])
        out.append(["greedy" if r["beam"] == 1 else f"beam {r['beam']}", str(r["batch"]), engine_name(r),
                    f"{r['tokens_per_second']:.0f}", f"{r['best_tokens_per_second']:.0f}",
                    f"{r['sentences_per_second']:.2f}", f"{r['peak_rss_mb']:.0f} ({r['imports_rss_mb']:.0f})",
                    f"{r['other_cores']:.2f}", f"{base['tokens_per_second'] / r['tokens_per_second']:.2f}"])
    return markdown(["search", "batch", "engine", "tokens/s", "best tokens/s", "sentences/s",
                     "peak RSS MB (imports)", "others' cores", "qkv ÷ engine"], out)


def best_rows(rows: list[dict[str, Any]]) -> dict[tuple[int, int, str], dict[str, Any]]:
    """(beam, batch, kind) -> the fastest decoding row of that kind on the base model; kinds: qkv
    float32 / bf16 / int8 (any threads, packing or workers), HF (float32 or bf16), CT2 float32 / int8."""
    def kind(r: dict[str, Any]) -> str:
        if r["engine"] == "ct2":
            return f"CT2 {r['compute_type']}"
        if r["engine"] == "hf":
            return "HF"
        return "qkv " + (r.get("quantize") or {"bf16": "bf16"}.get(r.get("precision", ""), "float32"))

    best: dict[tuple[int, int, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["beam"], r["batch"], kind(r))
        if r.get("model") != "opus" and r.get("cache", True) and (
                key not in best or r["tokens_per_second"] > best[key]["tokens_per_second"]):
            best[key] = r
    return best


def peer_table(rows: list[dict[str, Any]]) -> str:
    """Each engine's best row per workload, and its ratio to each peer's best row of that workload."""
    best = best_rows(rows)
    kinds = ["qkv float32", "qkv bf16", "qkv int8", "HF", "CT2 float32", "CT2 int8"]
    peers = ["HF", "CT2 float32", "CT2 int8"]
    out = []
    for beam, batch in sorted({(b, n) for b, n, _ in best}):
        for k in kinds:
            r = best.get((beam, batch, k))
            if r is None:
                continue
            ratios = [f"{r['tokens_per_second'] / best[beam, batch, p]['tokens_per_second']:.2f}"
                      if (beam, batch, p) in best else "" for p in peers]
            out.append(["greedy" if beam == 1 else f"beam {beam}", str(batch), k, engine_name(r),
                        f"{r['tokens_per_second']:.0f}", *ratios])
    return markdown(["search", "batch", "best of", "row", "tokens/s", *(f"÷ {p} best" for p in peers)], out)


def train_table(rows: list[dict[str, Any]], peak: float) -> str:
    def like(r: dict[str, Any]) -> tuple[bool, str]:  # compare like with like
        return bool(r.get("keep_freed_memory")), r.get("precision", "fp32")

    qkv = {like(r): r for r in rows if r["engine"] == "qkv"}
    out = [[engine_name(r) + (" + keep_freed_memory" if r.get("keep_freed_memory") else ""),
            str(r["target_tokens"]), f"{r['seconds']:.2f}", f"{r['tokens_per_second']:.0f}",
            f"{r['gflops_per_second']:.0f}", f"{100 * r['gflops_per_second'] / peak:.0f}%",
            f"{r['peak_rss_mb']:.0f}", f"{r['other_cores']:.2f}",
            f"{qkv[like(r)]['tokens_per_second'] / r['tokens_per_second']:.2f}"]
           for r in rows]
    return markdown(["engine", "target tokens/step", "s/step", "target tokens/s", "GFLOP/s", "of matmul peak",
                     "peak RSS MB", "others' cores", "qkv ÷ engine"], out)


def attention_table(rows: list[dict[str, Any]]) -> str:
    by = {(r["length"], r["explicit"]): r for r in rows}
    lengths = sorted({r["length"] for r in rows})
    out = []
    for i, L in enumerate(lengths):
        fused, explicit = by[L, False], by[L, True]
        growth = "" if i == 0 else (f"{fused['seconds'] / by[lengths[i - 1], False]['seconds']:.1f} / "
                                    f"{explicit['seconds'] / by[lengths[i - 1], True]['seconds']:.1f}")
        out.append([str(L), f"{1e3 * fused['seconds']:.1f}", f"{1e3 * explicit['seconds']:.1f}",
                    f"{explicit['seconds'] / fused['seconds']:.1f}", f"{fused['extra_peak_mb']:.0f}",
                    f"{explicit['extra_peak_mb']:.0f}", f"{8 * L * L * 4 / 2**20:.0f}", growth,
                    f"{max(fused['other_cores'], explicit['other_cores']):.2f}"])
    return markdown(["L", "fused ms", "explicit ms", "explicit ÷ fused", "fused peak MB", "explicit peak MB",
                     "one H·L² fp32 tensor MB", "time × vs L/2 (fused / explicit)", "others' cores"], out)


# --- the run --------------------------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workloads: a smoke run of every path")
    parser.add_argument("--json", default="benchmarks/results/speed.json", help="where to write the results")
    parser.add_argument("--vocab", type=int, default=common.VOCAB)
    parser.add_argument("--src-len", type=int, default=common.SRC_LEN, help="source tokens (eos added)")
    parser.add_argument("--new-tokens", type=int, default=common.NEW_TOKENS,
                        help="output tokens per hypothesis")
    parser.add_argument("--batch1-sentences", type=int, default=common.BATCH1_SENTENCES,
                        help="sentences decoded one at a time")
    parser.add_argument("--batch32-sentences", type=int, default=common.BATCH32_SENTENCES,
                        help="sentences decoded 32 at a time")
    parser.add_argument("--cache-off", action="store_true",
                        help="also time qkv greedy decoding without the decoder cache (every step "
                        "recomputes the prefix)")
    parser.add_argument("--train-sentences", type=int, default=160, help="pairs per training step (25 target tokens)")
    parser.add_argument("--matmul-size", type=int, default=4096)
    parser.add_argument("--max-attention-length", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.batch1_sentences, args.batch32_sentences, args.train_sentences = 2, 32, 16
        args.matmul_size, args.max_attention_length, args.repeats = 1024, 512, 1
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker), Path(args.workdir))), flush=True)
        return
    started, load_before = time.perf_counter(), os.getloadavg()
    machine, versions = common.machine(), common.versions()
    print(common.describe(machine, versions), flush=True)
    from qkv.runtime.precision import describe_hardware, native_bf16  # torch: not in CT2's workers

    shared = {"vocab": args.vocab, "repeats": args.repeats}
    bf16 = native_bf16("cpu")  # bf16 rows where the CPU multiplies bf16 natively
    print(describe_hardware("cpu"), flush=True)
    with tempfile.TemporaryDirectory(prefix="qkv-speed-") as tmp:
        work = Path(tmp)
        print("building the model (HF), importing it into qkv, converting it to CTranslate2 ...", file=sys.stderr)
        build(work, args)
        correctness = check(work, args)
        decode_specs = []
        for beam in (1, 4):
            for batch, n in ((1, args.batch1_sentences), (32, args.batch32_sentences)):
                setting = {**shared, "task": "decode", "beam": beam, "batch": batch, "sentences": n,
                           "new_tokens": args.new_tokens}
                decode_specs += [{**setting, "engine": "qkv", "pack": False}]
                decode_specs += [{**setting, "engine": "qkv", "quantize": q, "workers": w, "processes": fork}
                                 for q in (None, "int8") for w, fork in WORKERS]
                decode_specs += [{**setting, "engine": "qkv", "precision": "bf16", "workers": w, "processes": fork}
                                 for w, fork in WORKERS if bf16]
                decode_specs += [{**setting, "engine": "hf", "precision": "bf16"}] if bf16 else []
                if beam == 1 and args.cache_off:
                    decode_specs += [{**setting, "engine": "qkv", "cache": False}]
                decode_specs += [{**setting, "engine": "hf"}]
                decode_specs += [{**setting, "engine": "ct2", "compute_type": ct, "threads_label": label,
                                  "inter": inter, "intra": intra}
                                 for ct in ("float32", "int8") for label, inter, intra in CT2_THREADS]
                decode_specs += [{**setting, "engine": engine, "model": "opus"} for engine in ("qkv", "hf")]
        decoding = [run_worker(spec, work) for spec in decode_specs]
        matmul = run_worker({**shared, "task": "matmul", "size": args.matmul_size, "repeats": 5}, work)
        training = [run_worker({**shared, "task": "train", "engine": engine, "sentences": args.train_sentences,
                                "src_len": args.src_len, "tgt_len": 25, "keep_freed_memory": keep}, work)
                    for keep in (False, True) for engine in ("qkv", "hf")]
        training += [run_worker({**shared, "task": "train", "engine": engine, "sentences": args.train_sentences,
                                 "src_len": args.src_len, "tgt_len": 25, "keep_freed_memory": True,
                                 "precision": "bf16", **extra}, work)
                     for engine, extra in (("qkv", {}), ("hf", {}), ("hf", {"attention": "eager"})) if bf16]
        attention = [run_worker({**shared, "task": "attention", "length": L, "explicit": explicit}, work)
                     for L in ATTENTION_LENGTHS if args.max_attention_length >= L for explicit in (False, True)]

    machine["load_average_before_after"] = [load_before[0], os.getloadavg()[0]]
    peak = matmul["gflops_per_second"]
    print(f"\nload average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{time.perf_counter() - started:.0f} s in all")
    print(f"\ncheck: logits max |qkv - HF| = {correctness['logits_max_abs_diff']:.1e} (packed "
          f"{correctness['packed_logits_max_abs_diff']:.1e}); greedy ids qkv (packed) == HF on "
          f"{correctness['qkv_equals_hf']}/{correctness['sentences']} sentences; CT2 float32 == HF on "
          f"{correctness['ct2_float32_equals_hf']}/{correctness['sentences']}; OPUS-MT shape qkv == HF on "
          f"{correctness['opus_qkv_equals_hf']}/{correctness['sentences']}")
    print(f"\nDecoding: {args.src_len} + eos source tokens, exactly {args.new_tokens} new tokens per hypothesis; "
          f"batch 1: {args.batch1_sentences} sentences, batch 32: {args.batch32_sentences}; "
          "qkv ÷ engine > 1: qkv faster")
    print(decode_table(decoding))
    print("\nEach engine's best row against each peer's best row (the same workload, this run)")
    print(peer_table(decoding))
    print(f"\nTraining step (forward + backward + Adam; bf16 rows: bf16 autocast, fp32 master weights); fp32 matmul peak {peak:.0f} GFLOP/s "
          f"({args.matmul_size}² matmul, {matmul['threads']} threads)")
    print(train_table(training, peak))
    print(f"\nAttention: one encoder self-attention layer (d_model {D_MODEL}, {HEADS} heads, batch 1), "
          "forward")
    print(attention_table(attention))
    result = {"benchmark": "speed", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine, "versions": versions, "settings": vars(args), "check": correctness,
              "decoding": decoding, "matmul_peak": matmul, "training": training, "attention": attention,
              "seconds": time.perf_counter() - started}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
