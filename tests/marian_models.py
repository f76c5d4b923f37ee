"""OPUS-MT-shaped Marian directories built offline, as people have them on disk: a random-weight
`MarianMTModel` with OPUS-MT's configuration (swish, scaled embeddings, a non-zero final_logits_bias,
eos 0, pad = decoder start = the last id), two SentencePiece models trained on a few hundred local
sentences, a `vocab.json` in Marian's order (not SentencePiece's) and the files `MarianTokenizer`
writes; and a Hugging Face hub cache holding one, laid out as huggingface_hub lays it out."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import sentencepiece as spm
import torch

transformers = pytest.importorskip("transformers")

SHA = "0123456789abcdef0123456789abcdef01234567"

EN_WORDS = ["a", "man", "woman", "dog", "reads", "runs", "over", "green", "grass", "in", "the", "park", "child", "plays", "with", "red", "blue", "ball", "three", "newspapers", "street", "house", "city", "12", "7", "2024", "3.5"]
FR_WORDS = ["un", "homme", "femme", "chien", "lit", "court", "sur", "herbe", "verte", "dans", "le", "parc", "enfant", "joue", "avec", "rouge", "bleu", "balle", "trois", "journaux", "café", "crème", "naïve", "façade", "déjà", "rue", "maison", "ville", "été", "où"]
LANGUAGE_TOKENS = [">>fra<<", ">>deu<<"]


def _sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(n)]


def _spm_model(texts: list[str], vocab_size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model,
                                   vocab_size=vocab_size, hard_vocab_limit=False, minloglevel=2,
                                   character_coverage=1.0, num_threads=1)
    return model.getvalue()


def _pieces(proto: bytes) -> list[str]:
    """The model's ordinary pieces (SentencePiece's <unk>, <s>, </s> left out, as Marian does)."""
    sp = spm.SentencePieceProcessor(model_proto=proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))]


def _marian_vocab(pieces: list[str], size: int, seed: int) -> dict[str, int]:
    """Marian's order: </s> 0, <unk> 1, the pieces shuffled (so ids differ from SentencePiece's),
    filler up to size - 1, and <pad> last."""
    pieces = list(dict.fromkeys(pieces))
    random.Random(seed).shuffle(pieces)
    tokens = ["</s>", "<unk>", *pieces]
    tokens += [f"<filler{i}>" for i in range(size - 1 - len(tokens))] + ["<pad>"]
    return {token: i for i, token in enumerate(tokens)}


def build_marian_dir(directory: Path, separate: bool) -> Path:
    """A Marian directory: config.json, weights, source.spm, target.spm, vocab.json (and
    target_vocab.json), tokenizer_config.json. Separate vocabularies store pytorch_model.bin (every
    tensor, positions included); the shared one model.safetensors as save_pretrained writes it."""
    directory.mkdir(parents=True)
    src_proto = _spm_model(_sentences(EN_WORDS, 300, seed=0), 120)
    tgt_proto = _spm_model(_sentences(FR_WORDS, 300, seed=1), 120)
    (directory / "source.spm").write_bytes(src_proto)
    (directory / "target.spm").write_bytes(tgt_proto)
    size = 2 + len(_pieces(src_proto)) + len(_pieces(tgt_proto)) + len(LANGUAGE_TOKENS) + 1
    kwargs: dict[str, Any] = {}
    if separate:
        vocab = _marian_vocab(_pieces(src_proto), size, seed=2)
        target = _marian_vocab(_pieces(tgt_proto), size, seed=3)
        (directory / "target_vocab.json").write_text(json.dumps(target))
        kwargs = dict(target_vocab_file=str(directory / "target_vocab.json"), separate_vocabs=True)
    else:
        vocab = _marian_vocab(_pieces(src_proto) + _pieces(tgt_proto) + LANGUAGE_TOKENS, size, seed=2)
    (directory / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                             str(directory / "vocab.json"), source_lang="en", target_lang="fr",
                                             **kwargs)
    tokenizer.save_pretrained(directory)
    pad = size - 1
    config = transformers.MarianConfig(
        vocab_size=size, decoder_vocab_size=size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64, activation_function="swish", scale_embedding=True, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=not separate, dropout=0.0, attention_dropout=0.0, init_std=0.3)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
    if separate:
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
        config.save_pretrained(directory)
    else:
        model.save_pretrained(directory)
    return directory


def hub_cache(root: Path, repo: str, source: Path, revision: str = "main") -> Path:
    """A Hugging Face hub cache holding `source`'s files as repo at revision (one snapshot)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / revision).write_text(SHA)
    shutil.copytree(source, folder / "snapshots" / SHA, dirs_exist_ok=True)
    return root
