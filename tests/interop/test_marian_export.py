"""Exporting qkv models as Hugging Face Marian directories (`qkv export marian`).

Oracle: `transformers` itself. `MarianTokenizer.from_pretrained` must give qkv's source ids,
`MarianMTModel.from_pretrained` qkv's logits, and its `generate` (greedy, and beam 4 with
length_penalty 0, the directory's default) the ids and texts of qkv's `Translator` (alpha 0:
transformers has no GNMT length penalty). `qkv convert marian` of the export gives back the same
tensors. The trained model is tests/conftest.py's `short_demo`; the other variants are random.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from qkv import Transformer, TransformerConfig  # noqa: E402
from qkv.apps.cli import main  # noqa: E402
from qkv.apps.demo import DemoResult  # noqa: E402
from qkv.apps.translator import Translator  # noqa: E402
from qkv.data.batching import pad_sequences  # noqa: E402
from qkv.data.tokenizer import SubwordTokenizer  # noqa: E402
from qkv.decode.options import DecodeOptions  # noqa: E402
from qkv.interop.marian import convert_marian  # noqa: E402
from qkv.interop.marian_export import check_marian_exportable, export_marian  # noqa: E402
from qkv.model import DecoderOnly  # noqa: E402
from qkv.modeldir import load_config, load_model_dir, save_model_dir  # noqa: E402
from sentences import EN, ZH  # noqa: E402

POSITIONS = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
MARIAN_SETTINGS = (
    "vocab_size",
    "decoder_vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_ffn_dim",
    "activation_function",
    "max_position_embeddings",
    "scale_embedding",
    "share_encoder_decoder_embeddings",
    "tie_word_embeddings",
    "pad_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)
EXPORTED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "source.spm",
    "target.spm",
    "vocab.json",
    "tokenizer_config.json",
    "README.md",
)


def hf_translate(out: Path, texts: list[str], **generate: Any) -> list[tuple[list[int], str]]:
    """(ids after the decoder start up to eos, text) of each text, translated alone by the Marian
    directory `out`. The default max_length is qkv translate's limit (the source's tokens + 50, then
    eos); max_length=None leaves generation_config.json's."""
    model = transformers.MarianMTModel.from_pretrained(out).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    eos = model.config.eos_token_id
    results = []
    for text in texts:
        batch = tokenizer([text], return_tensors="pt")
        length = batch["input_ids"].size(1)  # eos included
        options = {"max_length": length + 51, **generate}  # decoder start + (length - 1) + 50 + eos
        options = {key: value for key, value in options.items() if value is not None}
        row = model.generate(**batch, **options)[0].tolist()
        ids = row[1:]
        ids = ids[: ids.index(eos)] if eos in ids else ids
        results.append((ids, tokenizer.decode(row, skip_special_tokens=True)))
    return results


def qkv_translate(model_dir: Path, texts: list[str], **options: Any) -> list[tuple[list[int], str]]:
    translations = Translator.load(model_dir).translate_detailed(texts, DecodeOptions(**options))
    return [(t.tokens, t.text) for t in translations]


def assert_same_weights(original: Path, converted: Path) -> None:
    """The converted model's tensors equal the original's (biases a bias=False model lacks: zeros),
    and so do its settings, but for Marian's capped position table and the biases."""
    ours, theirs = load_model_dir(original).state_dict(), load_model_dir(converted).state_dict()
    assert set(ours) <= set(theirs)
    for name, tensor in theirs.items():
        expected = ours.get(name, torch.zeros_like(tensor))
        assert torch.equal(tensor, expected), name

    def settings(directory: Path) -> dict[str, Any]:  # a shared vocabulary's size, given or None
        cfg = load_config(directory)[1]
        return {**cfg.to_dict(), "tgt_vocab_size": cfg.target_vocab_size}

    assert settings(converted) == {**settings(original), "cap_positions": True, "bias": True}


# --- the trained demo model --------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(
    short_demo: DemoResult, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, list[str]]:
    """(the demo's model directory, its Marian export by the command line, 12 test sources)."""
    out = tmp_path_factory.mktemp("marian-export") / "demo-marian"
    assert main(["export", "marian", str(short_demo.out_dir), "--out", str(out)]) == 0
    sources = [source for source, _, _ in short_demo.examples[::25]]
    return short_demo.out_dir, out, sources


@pytest.mark.slow
def test_the_directory_is_what_transformers_reads(demo: tuple[Path, Path, list[str]]) -> None:
    _, out, _ = demo
    assert {p.name for p in out.iterdir()} == set(EXPORTED_FILES)
    model, info = transformers.MarianMTModel.from_pretrained(out, output_loading_info=True)
    assert set(info["missing_keys"]) <= POSITIONS  # computed by transformers
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.dtype == torch.float32 and model.config.decoder_start_token_id == 2  # qkv's bos
    vocab = json.loads((out / "vocab.json").read_text())
    assert [vocab[p] for p in ("<pad>", "<unk>", "<s>", "</s>")] == [0, 1, 2, 3]  # qkv's ids


def test_marian_tokenizer_gives_qkv_ids(demo: tuple[Path, Path, list[str]]) -> None:
    model_dir, out, sources = demo
    texts = [*sources, "12 34", "x"]
    ours = SubwordTokenizer.load(model_dir)
    theirs = transformers.MarianTokenizer.from_pretrained(out)
    assert theirs(texts)["input_ids"] == [[*ids, ours.eos_id] for ids in ours.encode_src(texts)]
    assert (theirs.pad_token_id, theirs.unk_token_id, theirs.eos_token_id) == (0, 1, 3)


@pytest.mark.parametrize("beam", [1, 4], ids=["greedy", "beam4"])
def test_generate_equals_qkv_translate(demo: tuple[Path, Path, list[str]], beam: int) -> None:
    """Ids and texts; beam search without length penalty on both sides."""
    model_dir, out, sources = demo
    expected = qkv_translate(model_dir, sources, beam=beam, alpha=0.0)
    assert hf_translate(out, sources, num_beams=beam, length_penalty=0.0) == expected
    assert all(ids for ids, _ in expected)  # the model ends its sentences before the limit


def test_the_default_search_is_qkv_beam_4_without_length_penalty(
    demo: tuple[Path, Path, list[str]],
) -> None:
    model_dir, out, sources = demo
    defaults = hf_translate(out, sources, max_length=None)  # generation_config.json's settings only
    assert defaults == qkv_translate(model_dir, sources, beam=4, alpha=0.0)


def test_qkv_to_marian_to_qkv_is_exact(demo: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    model_dir, out, sources = demo
    converted = convert_marian(out, tmp_path / "back")
    assert_same_weights(model_dir, converted)
    for options in ({}, {"beam": 1}):
        assert qkv_translate(converted, sources, **options) == qkv_translate(
            model_dir, sources, **options
        )


@pytest.mark.parametrize(
    "fixture", ["marian_dir", "marian_separate_dir"], ids=["shared", "separate"]
)
def test_marian_to_qkv_to_marian_gives_the_original_model(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """An imported OPUS-MT-like model (Marian's ids: eos 0, pad = decoder start = the last id,
    language tokens) comes back with its tensors, vocabularies and tokenizer ids."""
    source = request.getfixturevalue(fixture)
    qkv_dir = convert_marian(source, tmp_path / "qkv")
    out = export_marian(qkv_dir, tmp_path / "marian")
    original = transformers.MarianMTModel.from_pretrained(source).state_dict()
    exported = load_file(out / "model.safetensors")
    assert exported
    for name, tensor in exported.items():
        assert torch.equal(tensor, original[name]), name
    for name in set(original) - set(exported):  # only position tables and tied copies left out
        assert "embed_positions" in name or any(
            torch.equal(original[name], t) for t in exported.values()
        ), name
    for name in ("source.spm", "target.spm"):
        assert (out / name).read_bytes() == (source / name).read_bytes()
    for name in ("vocab.json", "target_vocab.json"):
        assert (out / name).exists() == (source / name).exists()
        if (source / name).exists():
            assert json.loads((out / name).read_text()) == json.loads((source / name).read_text())
    texts = ["A man reads 3 newspapers in the park.", ">>fra<< a dog runs", "café crème"]
    ours, theirs = (transformers.MarianTokenizer.from_pretrained(d) for d in (out, source))
    assert ours(texts)["input_ids"] == theirs(texts)["input_ids"]
    config = transformers.MarianConfig.from_pretrained(out)
    expected = transformers.MarianConfig.from_pretrained(source)
    for key in MARIAN_SETTINGS:
        assert getattr(config, key) == getattr(expected, key), key


# --- random models: the other options ------------------------------------------------------------
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {},  # relu, shared and tied
    "gelu-untied-nobias-unscaled": dict(
        activation="gelu", tie_output=False, bias=False, scale_embeddings=False
    ),
    "silu-separate-outbias": dict(activation="silu", share_embeddings=False, output_bias=True),
    "separate-untied-odd-d_model": dict(
        share_embeddings=False, tie_output=False, d_model=33, n_heads=3
    ),
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, SubwordTokenizer]:
    """A joint and a separate tokenizer of tests/sentences.py (English -> Chinese, byte pieces)."""
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        joint: SubwordTokenizer.train(EN, ZH, root / str(joint), vocab_size=500, joint=joint)
        for joint in (True, False)
    }


def random_model(tokenizer: SubwordTokenizer, **overrides: Any) -> Transformer:
    """A tiny random Transformer whose biases and norms are not their initial zeros and ones."""
    torch.manual_seed(0)
    cfg = TransformerConfig.preset(
        "tiny",
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        dropout=0.0,
        attention_dropout=0.0,
        **overrides,
    )
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("variant", VARIANTS)
def test_random_variants_compute_the_same_logits_and_greedy_ids(
    variant: str, tokenizers, tmp_path: Path
) -> None:
    overrides = VARIANTS[variant]
    tokenizer = tokenizers[overrides.get("share_embeddings", True)]
    model = random_model(tokenizer, **overrides)
    model_dir = save_model_dir(tmp_path / "qkv", model, tokenizer)
    out = export_marian(model_dir, tmp_path / "marian")
    hf, info = transformers.MarianMTModel.from_pretrained(out, output_loading_info=True)
    assert set(info["missing_keys"]) <= POSITIONS and not info["unexpected_keys"]
    cfg = model.config
    texts = EN[:3]
    src = pad_sequences(
        [[*ids, cfg.eos_id] for ids in tokenizer.encode_src(texts)], cfg.pad_id
    )  # (B, S)
    tgt = torch.randint(4, cfg.target_vocab_size, (len(texts), 7))
    tgt[:, 0] = cfg.bos_id
    with torch.no_grad():
        expected = hf(
            input_ids=src, attention_mask=src.ne(cfg.pad_id), decoder_input_ids=tgt
        ).logits
        torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=0)
    ours = qkv_translate(model_dir, texts, beam=1)  # a random model writes up to the length limit
    theirs = hf_translate(out, texts, num_beams=1)
    assert [ids for ids, _ in theirs] == [ids for ids, _ in ours]
    assert all(
        len(ids) == len(enc) + 50
        for (ids, _), enc in zip(ours, tokenizer.encode_src(texts), strict=True)
    )
    assert_same_weights(model_dir, convert_marian(out, tmp_path / "back"))


# --- what is refused ---------------------------------------------------------------------------
REFUSED = {  # TransformerConfig overrides -> what the one line names
    "pre-norm": ({"norm_first": True}, "norm_first=True (pre-norm): Marian is post-norm"),
    "rope": ({"positional": "rope"}, "positional='rope': Marian has sinusoidal positions only"),
    "rmsnorm": ({"norm": "rmsnorm"}, "norm='rmsnorm': Marian has LayerNorm only"),
    "learned": ({"positional": "learned"}, "positional='learned'"),
    "alibi": ({"positional": "alibi"}, "positional='alibi'"),
    "relative": ({"positional": "relative"}, "positional='relative'"),
    "swiglu": ({"activation": "swiglu"}, "activation='swiglu'"),
    "gqa": ({"n_kv_heads": 2}, "grouped-query attention"),
    "dot": ({"attention": "dot"}, "attention='dot'"),
    "temperature": ({"attention_temperature": 2.0}, "attention_temperature=2.0"),
    "eps": ({"norm_eps": 1e-6}, "norm_eps=1e-06"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_marian_cannot_compute_is_refused_in_one_line(name: str) -> None:
    overrides, reason = REFUSED[name]
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=40, **overrides))
    with pytest.raises(ValueError, match="cannot export to Marian") as error:
        check_marian_exportable(model)
    assert reason in str(error.value) and "\n" not in str(error.value)


def test_refusals_through_the_command_line_write_nothing(
    tokenizers, tmp_path: Path, capsys
) -> None:
    tokenizer = tokenizers[True]
    pre_norm = save_model_dir(
        tmp_path / "pre-norm", random_model(tokenizer, norm_first=True), tokenizer
    )
    paper = save_model_dir(tmp_path / "paper", random_model(tokenizer), tokenizer)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    cases = [  # (arguments, what the one line says, the output directory)
        ([str(pre_norm)], "pre-norm", tmp_path / "out1"),
        ([str(paper), "--quantization", "int8"], "float32 weights only", tmp_path / "out2"),
        ([str(paper)], "not an empty directory", tmp_path / "busy"),
    ]
    for arguments, message, out in cases:
        assert main(["export", "marian", *arguments, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("qkv export: error: ") and err.count("\n") == 1, err
        assert message in err, err
        assert not out.exists() or [p.name for p in out.iterdir()] == ["notes.txt"]
    with pytest.raises(ValueError, match="not DecoderOnly"):
        check_marian_exportable(DecoderOnly(TransformerConfig.preset("tiny", src_vocab_size=40)))


def test_a_lowercasing_tokenizer_is_refused(tmp_path: Path) -> None:
    tokenizer = SubwordTokenizer.train(EN, EN, tmp_path / "tok", vocab_size=120, lowercase=True)
    model_dir = save_model_dir(tmp_path / "qkv", random_model(tokenizer), tokenizer)
    with pytest.raises(ValueError, match="lowercases its input, MarianTokenizer does not"):
        export_marian(model_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()
