"""`qkv translate` and `qkv evaluate` on an `RNNSearch` (GRU + Bahdanau) model directory: the
command line's translations equal the search functions run on the model one sentence at a time."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qkv import TransformerConfig
from qkv.apps.cli import main
from qkv.apps.translator import Translator
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode.options import DecodeOptions
from qkv.decode.search import beam_search, greedy
from qkv.model import AttentionWeights
from qkv.model.rnn import RNNSearch
from qkv.modeldir import load_model_dir, save_model_dir
from sentences import EN, ZH  # tests/sentences.py

SHORT = ["--max-len-a", "0.5", "--max-len-b", "3"]
OPTIONS = DecodeOptions(max_len_a=0.5, max_len_b=3)


@pytest.fixture(scope="module")
def rnn_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random RNNSearch with the tokenizer of the shared CLI test model."""
    tokenizer = SubwordTokenizer.load(model_dir)
    torch.manual_seed(0)
    cfg = TransformerConfig(arch="rnn", src_vocab_size=tokenizer.src_vocab_size, d_model=32,
                            n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    return save_model_dir(tmp_path_factory.mktemp("rnn"), RNNSearch(cfg), tokenizer)


def searched(directory: Path, lines: list[str], beam: int) -> list[str]:
    """Each line alone through the search functions: the oracle of the command line."""
    model = load_model_dir(directory).eval()
    tokenizer = SubwordTokenizer.load(directory)
    outputs = []
    for ids in tokenizer.encode_src(lines):
        src = torch.tensor([[*ids, tokenizer.eos_id]])
        max_len = OPTIONS.max_output_length(len(ids))
        if beam == 1:
            best = greedy(model, src, max_len=max_len)[0]
        else:
            best = beam_search(model, src, beam=beam, max_len=max_len)[0][0]
        outputs.append(tokenizer.decode_tgt([best.tokens])[0])
    return outputs


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_an_rnn_model_equals_the_search_functions(
    rnn_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], beam: int
) -> None:
    lines = [ZH[0], EN[1], ZH[2], EN[3]]  # different lengths: batched together, sorted
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(rnn_dir), "--input", str(tmp_path / "in.txt")]
    assert main([*argv, "--beam", str(beam), *SHORT]) == 0
    outputs = capsys.readouterr().out.splitlines()
    assert outputs == searched(rnn_dir, lines, beam) and all(outputs)


def test_attention_of_an_rnn_translation_is_its_bahdanau_weights(rnn_dir: Path) -> None:
    translator = Translator.load(rnn_dir)
    result = translator.translate_detailed([ZH[1]], OPTIONS, attention=True, alignment=True)[0]
    T, S = len(result.tokens) + 1, len(result.source_tokens)
    assert result.attention.shape == (T, S) and len(result.target_tokens) == T
    model = load_model_dir(rnn_dir).eval()  # the weights of a teacher-forced pass, by the model
    tok = translator.tokenizer
    src = torch.tensor([[*tok.encode_src([ZH[1]])[0], tok.eos_id]])
    weights = AttentionWeights()
    with torch.no_grad():
        model(src, torch.tensor([[model.config.bos_id, *result.tokens]]), weights=weights)
    torch.testing.assert_close(result.attention, weights.cross[-1][0, 0])
    assert result.alignment is not None


def test_evaluate_an_rnn_model(rnn_dir: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src.zh").write_text("\n".join(ZH[:3]) + "\n", encoding="utf-8")
    (tmp_path / "ref.en").write_text("\n".join(EN[:3]) + "\n", encoding="utf-8")
    argv = ["evaluate", "--model", str(rnn_dir), "--src", str(tmp_path / "src.zh"), "--ref",
            str(tmp_path / "ref.en"), "--output", str(tmp_path / "hyp.en"), "--beam", "2", *SHORT]
    assert main(argv) == 0
    assert "BLEU|nrefs:1" in capsys.readouterr().out
    hyps = (tmp_path / "hyp.en").read_text(encoding="utf-8").splitlines()
    assert hyps == searched(rnn_dir, ZH[:3], beam=2)


def test_an_ensemble_of_rnn_models_is_refused(rnn_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text(EN[0] + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(rnn_dir), "--model", str(rnn_dir),
            "--input", str(tmp_path / "in.txt")]
    assert main(argv) == 2
    assert "an ensemble takes Transformers only" in capsys.readouterr().err
