"""The model directory the CLI tests decode with."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qkv import Transformer, TransformerConfig
from qkv.data.tokenizer import SubwordTokenizer
from qkv.modeldir import save_model_dir
from sentences import EN, ZH  # tests/sentences.py


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Transformer and a SentencePiece model trained on English and Chinese."""
    directory = tmp_path_factory.mktemp("model")
    tokenizer = SubwordTokenizer.train(EN, ZH, directory, vocab_size=500)
    torch.manual_seed(0)
    cfg = TransformerConfig.preset(
        "tiny", src_vocab_size=tokenizer.src_vocab_size, dropout=0.0, attention_dropout=0.0
    )
    return save_model_dir(directory, Transformer(cfg), tokenizer)
