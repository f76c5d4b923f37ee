"""What benchmarks/finetune_speed.py trains on: a random-weight Marian directory of OPUS-MT's shape,
the training pairs, the recipe of `qkv train --init_from` and the batches that recipe makes.

The Marian directory is what an OPUS-MT download holds (config.json, model.safetensors, source.spm,
target.spm, vocab.json, tokenizer_config.json), built offline: two SentencePiece models trained on
the training text, a joint `vocab.json` in Marian's order (</s> 0, <unk> 1, the pieces, filler
tokens up to the model's vocabulary size, <pad> last) and a `MarianMTModel` with OPUS-MT's
conventions (swish, scaled embeddings, tied embeddings, eos 0, pad = decoder start = the last id,
a non-zero final_logits_bias), its weights random as in benchmarks/speed.py.

The batches are the ones `qkv train` makes for the recipe (its sampler, seeded by the recipe):
`training_batches` builds a `Trainer` from the same overrides the timed `qkv train` runs get and
takes its first batches, so that the Hugging Face loop trains on the same tensors.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
import shutil
from pathlib import Path
from typing import Any

# OPUS-MT's base shape (Helsinki-NLP/opus-mt-en-de: 58,101 joint tokens); "quick" a smoke-test size
SHAPES: dict[str, dict[str, int]] = {
    "base": dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=58101, pieces=8000),
    "quick": dict(d_model=64, layers=2, heads=4, ffn=256, vocab=2000, pieces=300),
}
VALID_PAIRS = 20  # qkv validates the starting model and the last update on these (not timed)
EN_WORDS = [
    "a",
    "man",
    "woman",
    "dog",
    "child",
    "runs",
    "reads",
    "plays",
    "with",
    "the",
    "red",
    "blue",
    "ball",
    "in",
    "park",
    "street",
    "city",
    "house",
    "three",
    "two",
    "old",
    "young",
    "on",
    "near",
]
DE_WORDS = [
    "ein",
    "mann",
    "frau",
    "hund",
    "kind",
    "läuft",
    "liest",
    "spielt",
    "mit",
    "dem",
    "roten",
    "blauen",
    "ball",
    "im",
    "park",
    "straße",
    "stadt",
    "haus",
    "drei",
    "zwei",
    "alt",
    "jung",
    "auf",
    "bei",
]


def write_pairs(work: Path, corpus: str, data_dir: Path, n: int) -> dict[str, Path]:
    """work/{train,valid}.{en,de}: the first `n` (and VALID_PAIRS) English-German pairs of Multi30k
    under data_dir, or `n` random sentences of a few words ("synthetic": no data needed)."""
    if corpus == "multi30k":
        sides = {
            (split, lang): _lines(data_dir / "multi30k" / f"{split}.{lang}.gz", count)
            for split, count in (("train", n), ("val", VALID_PAIRS))
            for lang in ("en", "de")
        }
        texts = {(("valid" if s == "val" else s), lang): t for (s, lang), t in sides.items()}
    else:
        rng = random.Random(0)
        lengths = [rng.randint(4, 20) for _ in range(n + VALID_PAIRS)]
        en = [" ".join(rng.choices(EN_WORDS, k=k)) for k in lengths]
        de = [" ".join(rng.choices(DE_WORDS, k=k)) for k in lengths]
        texts = {("train", "en"): en[:n], ("train", "de"): de[:n]}
        texts |= {("valid", "en"): en[n:], ("valid", "de"): de[n:]}
    paths = {}
    for (split, lang), lines in texts.items():
        paths[f"{split}_{lang}"] = work / f"{split}.{lang}"
        paths[f"{split}_{lang}"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def _lines(path: Path, n: int) -> list[str]:
    if not path.is_file():
        raise SystemExit(f"finetune_speed: no {path} (give --data-dir, or --corpus synthetic)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


def _spm_model(texts: list[str], pieces: int) -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=pieces,
        hard_vocab_limit=False,
        minloglevel=2,
        character_coverage=1.0,
        num_threads=1,
    )
    return model.getvalue()


def _pieces(proto: bytes) -> list[str]:
    """The model's ordinary pieces (<unk>, <s>, </s> left out, as Marian's vocab.json does)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=proto)
    n = sp.get_piece_size()
    return [sp.id_to_piece(i) for i in range(n) if not (sp.is_control(i) or sp.is_unknown(i))]


def marian_config(shape: dict[str, int], dropout: float) -> Any:
    """OPUS-MT's config.json at `shape`: swish, scaled and tied embeddings, one joint vocabulary,
    eos 0, pad = decoder start = the last id, dropout 0.1 in OPUS-MT (here `dropout`)."""
    from transformers import MarianConfig

    vocab = shape["vocab"]
    return MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=vocab,
        d_model=shape["d_model"],
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        dropout=dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )


def build_marian_dir(directory: Path, shape: dict[str, int], pairs: dict[str, Path]) -> int:
    """Write a Marian directory of OPUS-MT's shape and conventions (module docstring), random
    weights (torch seeded with 0), SentencePiece models trained on the training pairs; returns the
    model's number of parameters (the tied embedding once)."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    directory.mkdir(parents=True)
    protos = {}
    for side, lang in (("source", "en"), ("target", "de")):
        text = pairs[f"train_{lang}"].read_text(encoding="utf-8").splitlines()
        protos[side] = _spm_model(text, shape["pieces"])
        (directory / f"{side}.spm").write_bytes(protos[side])
    pieces = list(dict.fromkeys(_pieces(protos["source"]) + _pieces(protos["target"])))
    tokens = ["</s>", "<unk>", *pieces]
    if len(tokens) >= shape["vocab"]:
        raise SystemExit(f"finetune_speed: {len(tokens)} pieces do not fit {shape['vocab']} ids")
    tokens += [f"<filler{i}>" for i in range(shape["vocab"] - 1 - len(tokens))] + ["<pad>"]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    names = [str(directory / f) for f in ("source.spm", "target.spm", "vocab.json")]
    MarianTokenizer(*names, source_lang="en", target_lang="de").save_pretrained(directory)
    torch.manual_seed(0)
    model = MarianMTModel(marian_config(shape, dropout=0.1)).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1)  # OPUS-MT's bias is not zero
    model.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


def qkv_overrides(work: Path, pairs: dict[str, Path], args: Any) -> list[str]:
    """The `qkv train` flags of a timed run: from work/marian, the pairs, `--max_steps` warm-up +
    timed updates, a log row per update (its elapsed_s times the updates), validation only where a
    run from a trained model always validates (before the first update and after the last), no
    BLEU, no tensorboard, the data prepared once into work/prepared."""
    flags = {
        "init_from": work / "marian",
        "train_src": pairs["train_en"],
        "train_tgt": pairs["train_de"],
        "valid_src": pairs["valid_en"],
        "valid_tgt": pairs["valid_de"],
        "max_tokens": args.max_tokens,
        "max_steps": args.warmup_updates + args.updates,
        "log_every": 1,
        "valid_every": 1_000_000,
        "valid_bleu": "false",
        "valid_metric": "loss",
        "tensorboard": "false",
        "keep_checkpoints": 1,
        "precision": args.precision,
        "prepared_dir": work / "prepared",
        "model.dropout": args.dropout,
    }
    if args.loss_chunk_tokens:  # qkv's memory saver: the output projection + loss in chunks
        flags["loss_chunk_tokens"] = args.loss_chunk_tokens
    return [item for key, value in flags.items() for item in (f"--{key}", str(value))]


def training_batches(work: Path, overrides: list[str], updates: int) -> dict[str, Any]:
    """The first `updates` batches `qkv train OVERRIDES` trains on, as (src, tgt_in, tgt_out) id
    tensors (right-padded with the pad id): a Trainer of the same recipe (the same sampler, seed
    and data) made in this process, its run directory removed again. Also the pad id and the
    learning rate settings the run uses."""
    import torch

    from qkv.train import Trainer, load_train_config, parse_overrides

    cfg = load_train_config(None, parse_overrides(overrides))
    out = work / "batches-run"
    trainer = Trainer(cfg, out)
    batches = [
        tuple(t.clone() for t in trainer.task.loss_inputs(batch))
        for batch in itertools.islice(trainer._batches(), updates)  # the loop's own batches
    ]
    found = {
        "batches": batches,
        "pad_id": trainer.model.config.pad_id,
        "lr": trainer.optimizer.param_groups[0]["initial_lr"],  # the peak
        "schedule": cfg.schedule,
        "lr_warmup": cfg.warmup,
        "weight_decay": cfg.weight_decay,
        "label_smoothing": cfg.label_smoothing,
        "adam_betas": list(cfg.adam_betas),
        "adam_eps": cfg.adam_eps,
        "clip_norm": cfg.clip_norm,
    }
    del trainer
    shutil.rmtree(out)
    torch.save(found, work / "batches.pt")
    return found
