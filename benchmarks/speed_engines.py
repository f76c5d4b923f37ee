"""The base-shape model of speed.py in three engines and the measurements its worker processes run
(the correctness check it runs before any timing: speed_check.py).

`build` writes the models: a random Hugging Face `MarianMTModel` of the base shape
(`common.marian_config`), imported into qkv (`qkv.interop.marian.from_marian`) and converted to
CTranslate2 float32 and int8, and a second random model of OPUS-MT's shape and conventions. Each
engine is a function (sources, batch size) -> output ids per sentence. torch, qkv, transformers and
ctranslate2 are imported inside the functions that need them: a worker loads only its engine.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.common import (
    BOS,
    D_FF,
    D_MODEL,
    EOS,
    HEADS,
    LAYERS,
    UNK,
    marian_config,
    memory_mb,
    timed,
)

OPUS_EOS = 0  # OPUS-MT's eos; its pad and decoder start are the last id


# --- the shared setup: the model in three formats and the sources ---------------------------------


def token(i: int, vocab: int) -> str:
    """The vocabulary's i-th token string (CTranslate2 reads tokens, qkv and HF ids)."""
    return "<pad>" if i == vocab - 1 else {UNK: "<unk>", BOS: "<s>", EOS: "</s>"}.get(i, f"w{i}")


def opus_config(vocab: int) -> Any:
    """The base shape as OPUS-MT configures it: swish, eos 0, pad = decoder start = the last id."""
    config = marian_config(vocab)
    config.activation_function = "swish"
    config.eos_token_id, config.pad_token_id = OPUS_EOS, vocab - 1
    config.decoder_start_token_id = vocab - 1
    return config


def build(work: Path, args: argparse.Namespace) -> None:
    """Write work/{hf, qkv, ct2-float32, ct2-int8, opus-hf, opus-qkv} and work/sources.json
    (N, src_len + 1) ids ending with eos.

    Marian's pad is the last id (CTranslate2's Marian converter drops the last row as the pad), and
    the bos row is zero: CTranslate2 starts Marian decoders from a zero embedding."""
    import torch
    from ctranslate2.converters import TransformersConverter
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MarianMTModel, PreTrainedTokenizerFast

    from qkv.interop.marian import from_marian
    from qkv.modeldir import save_model_dir

    torch.manual_seed(0)
    hf = MarianMTModel(marian_config(args.vocab)).eval()
    with torch.no_grad():
        hf.model.shared.weight[BOS].zero_()
    hf.save_pretrained(work / "hf")
    vocab = {token(i, args.vocab): i for i in range(args.vocab)}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=words,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
    ).save_pretrained(work / "hf")
    save_model_dir(work / "qkv", from_marian(hf, unk_id=UNK))
    opus = MarianMTModel(opus_config(args.vocab)).eval()
    with torch.no_grad():
        opus.final_logits_bias.normal_(0.0, 0.1)  # OPUS-MT's bias is not zero
    opus.save_pretrained(work / "opus-hf")
    save_model_dir(work / "opus-qkv", from_marian(opus, unk_id=UNK))
    for quantization in ("float32", "int8"):
        TransformersConverter(str(work / "hf")).convert(
            str(work / f"ct2-{quantization}"), quantization=quantization, force=True
        )
    n = max(args.batch1_sentences, args.batch32_sentences)
    src = common.random_sentences(n, args.src_len, args.vocab, seed=1)
    (work / "sources.json").write_text(json.dumps(src.tolist()))


def load_sources(work: Path, n: int, eos: int = EOS) -> list[list[int]]:
    return [[*s[:-1], eos] for s in json.loads((work / "sources.json").read_text())[:n]]


# --- the three engines: sources (ids) -> output tokens per sentence -------------------------------

Translate = Callable[[list[list[int]], int], list[list[int]]]  # (sources, batch) -> ids, no eos


def qkv_engine(
    work: Path,
    beam: int,
    min_len: int,
    max_len: int,
    quantize: str | None = None,
    workers: int = 1,
    pack: bool | None = None,
    use_cache: bool = True,
    model: str = "qkv",
    precision: str = "fp32",
    processes: bool = False,
    capture: bool = False,
) -> Translate:
    import torch

    from qkv.decode.search import beam_search, greedy
    from qkv.modeldir import load_model_dir
    from qkv.runtime.prepare import prepare_for_decoding
    from qkv.runtime.runtime_options import RuntimeOptions
    from qkv.runtime.workers import ForkedWorkers, map_in_workers

    settings = RuntimeOptions(precision=precision, quantize=quantize, pack=pack, capture=capture)
    model = prepare_for_decoding(load_model_dir(work / model), settings)  # as Translator.load does

    def decode(src: torch.Tensor) -> list[list[int]]:
        if beam == 1:
            hyps = greedy(model, src, min_len=min_len, max_len=max_len, use_cache=use_cache)
            return [h.tokens for h in hyps]
        nbest = beam_search(
            model, src, beam=beam, min_len=min_len, max_len=max_len, use_cache=use_cache
        )
        return [hyps[0].tokens for hyps in nbest]

    forked = ForkedWorkers(decode, workers) if processes and workers > 1 else None  # as Translator

    def translate(sources: list[list[int]], batch: int) -> list[list[int]]:
        batches = [torch.tensor(sources[i : i + batch]) for i in range(0, len(sources), batch)]
        if forked is not None and len(batches) > 1:
            return [tokens for out in forked.map(batches) for tokens in out]
        return [tokens for out in map_in_workers(decode, batches, workers) for tokens in out]

    return translate


def hf_engine(
    work: Path, beam: int, min_len: int, max_len: int, model: str = "hf", precision: str = "fp32"
) -> Translate:
    import torch
    from transformers import MarianMTModel

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = MarianMTModel.from_pretrained(work / model).to(dtype).eval()
    eos = model.config.eos_token_id
    never = sorted({model.config.pad_token_id, model.config.decoder_start_token_id})

    def translate(sources: list[list[int]], batch: int) -> list[list[int]]:
        out = []
        for i in range(0, len(sources), batch):
            src = torch.tensor(sources[i : i + batch])
            with torch.inference_mode():
                ids = model.generate(
                    input_ids=src,
                    attention_mask=torch.ones_like(src),
                    do_sample=False,
                    num_beams=beam,
                    min_new_tokens=min_len,
                    max_new_tokens=max_len,
                    suppress_tokens=never,
                )
            for row in ids[:, 1:].tolist():  # drop the decoder start; cut at eos
                out.append(row[: row.index(eos)] if eos in row else row)
        return out

    return translate


def ct2_engine(
    work: Path,
    beam: int,
    min_len: int,
    max_len: int,
    vocab: int,
    compute_type: str,
    inter: int,
    intra: int,
) -> Translate:
    import ctranslate2

    translator = ctranslate2.Translator(
        str(work / f"ct2-{compute_type}"),
        device="cpu",
        compute_type=compute_type,
        inter_threads=inter,
        intra_threads=intra,
    )
    ids = {token(i, vocab): i for i in range(vocab)}

    def translate(sources: list[list[int]], batch: int) -> list[list[int]]:
        results = translator.translate_batch(
            [[token(i, vocab) for i in s] for s in sources],
            max_batch_size=batch,
            beam_size=beam,
            min_decoding_length=min_len,
            max_decoding_length=max_len,
            suppress_sequences=[["<s>"]],
        )
        return [[ids[t] for t in r.hypotheses[0]] for r in results]

    return translate


def import_engine(engine: str) -> None:
    """Import what an engine needs (transformers loads its modules lazily: import the model
    class)."""
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
        return qkv_engine(
            work,
            spec["beam"],
            min_len,
            max_len,
            spec.get("quantize"),
            spec.get("workers", 1),
            spec.get("pack"),
            spec.get("cache", True),
            opus + "qkv",
            spec.get("precision", "fp32"),
            spec.get("processes", False),
            spec.get("capture", False),
        )
    if spec["engine"] == "hf":
        return hf_engine(
            work, spec["beam"], min_len, max_len, opus + "hf", spec.get("precision", "fp32")
        )
    return ct2_engine(
        work,
        spec["beam"],
        min_len,
        max_len,
        spec["vocab"],
        spec["compute_type"],
        spec["inter"],
        spec["intra"],
    )


# --- measurements, each run by a worker subprocess ------------------------------------------------


def measure_decoding(work: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Decode spec["sentences"] sources in batches of spec["batch"], every hypothesis exactly
    new_tokens long."""
    import_engine(spec["engine"])
    imports_mb = memory_mb("VmRSS")
    n, new_tokens = spec["sentences"], spec["new_tokens"]
    translate = make_engine(work, spec, new_tokens, new_tokens)
    sources = load_sources(work, n, OPUS_EOS if spec.get("model") == "opus" else EOS)
    times, out = timed(lambda: translate(sources, spec["batch"]), spec["repeats"])
    lengths = sorted({len(o) for o in out})
    if len(out) != n or lengths != [new_tokens]:
        raise RuntimeError(
            f"{spec}: expected {n} outputs of {new_tokens} tokens, "
            f"got {len(out)} of lengths {lengths}"
        )
    return {
        **times,
        "tokens_per_second": n * new_tokens / times["seconds"],
        "best_tokens_per_second": n * new_tokens / times["best_seconds"],
        "sentences_per_second": n / times["seconds"],
        "peak_rss_mb": memory_mb("VmHWM"),
        "imports_rss_mb": imports_mb,
    }


def training_flops(vocab: int, batch: int, src_len: int, tgt_len: int) -> float:
    """Matmul FLOPs of one training step: 3 x forward (backward = 2 x forward), attention products
    included.

    Per layer, MACs per token: encoder 4 D^2 + 2 D F; decoder 6 D^2 + 2 D F, plus 2 D^2 per source
    token for the cross-attention keys/values; attention QK^T and AV: 2 D per (query, key) pair;
    output projection D V.
    """
    d, f, v = D_MODEL, D_FF, vocab
    S, T = src_len, tgt_len
    encoder = S * (4 * d * d + 2 * d * f) + 2 * S * S * d
    decoder = T * (6 * d * d + 2 * d * f) + S * 2 * d * d + 2 * T * T * d + 2 * T * S * d
    macs = batch * (LAYERS * encoder + LAYERS * decoder + T * d * v)
    return 3 * 2 * macs


def training_model(work: Path, spec: dict[str, Any], src: Any, tgt_in: Any) -> tuple[Any, Any]:
    """(the model of spec["engine"], a function of no arguments returning its logits)."""
    import torch

    if spec["engine"] == "qkv":
        from qkv.modeldir import load_model_dir
        from qkv.runtime.training import prepare_for_training

        model = load_model_dir(work / "qkv")
        prepare_for_training(model, spec.get("precision", "fp32"), torch.device("cpu"))  # as train
        return model, lambda: model(src, tgt_in)
    from transformers import MarianMTModel

    attention = spec.get("attention", "sdpa")
    model = MarianMTModel.from_pretrained(work / "hf", attn_implementation=attention)

    def forward() -> torch.Tensor:
        mask = torch.ones_like(src)
        return model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits

    return model, forward


def measure_training(work: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Forward + backward + Adam on one fixed batch: src (B, src_len + 1), tgt_in and labels
    (B, tgt_len)."""
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
    model, forward = training_model(work, spec, src, tgt_in)
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
    return {
        **times,
        "target_tokens": B * T,
        "tokens_per_second": B * T / times["seconds"],
        "gflops_per_second": flops / times["seconds"] / 1e9,
        "best_gflops_per_second": flops / times["best_seconds"] / 1e9,
        "flops_per_step": flops,
        "peak_rss_mb": memory_mb("VmHWM"),
        "imports_rss_mb": imports_mb,
        "threads": torch.get_num_threads(),
    }


def measure_matmul(spec: dict[str, Any]) -> dict[str, Any]:
    """Matmul peaks: the best of `repeats` (n x n) @ (n x n) products, after a warm-up, in fp32,
    and in bf16 where the CPU multiplies bf16 natively (else None)."""
    import torch

    from qkv.runtime.precision import native_bf16

    n = spec["size"]
    a, b = torch.randn(n, n), torch.randn(n, n)
    times, _ = timed(lambda: torch.matmul(a, b), spec["repeats"])
    bf16 = None
    if native_bf16("cpu"):
        a16, b16 = a.bfloat16(), b.bfloat16()
        times16, _ = timed(lambda: torch.matmul(a16, b16), spec["repeats"])
        bf16 = 2 * n**3 / times16["best_seconds"] / 1e9
    return {
        **times,
        "gflops_per_second": 2 * n**3 / times["best_seconds"] / 1e9,
        "bf16_gflops_per_second": bf16,
        "threads": torch.get_num_threads(),
    }


def measure_attention(spec: dict[str, Any]) -> dict[str, Any]:
    """One encoder self-attention layer on (1, L, 512): extra peak memory of the first call, then
    median time."""
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
