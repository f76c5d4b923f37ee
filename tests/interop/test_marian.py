"""Importing Marian / OPUS-MT models: qkv must compute Marian's function and read Marian's ids.

Oracle: the Hugging Face implementation itself (`transformers`, the `interop` extra): `MarianTokenizer`'s ids,
the logits of `MarianMTModel` on a teacher-forced batch, and the ids of its `generate` (greedy) against qkv's
`greedy` on the imported weights. The Marian directories come from conftest.py (built offline).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

transformers = pytest.importorskip("transformers")

from qkv.apps.cli import main  # noqa: E402
from qkv.apps.translator import Translator  # noqa: E402
from qkv.data.batching import pad_sequences  # noqa: E402
from qkv.data.tokenizer import SubwordTokenizer  # noqa: E402
from qkv.decode import greedy  # noqa: E402
from qkv.decode.options import DecodeOptions  # noqa: E402
from qkv.interop.marian import (  # noqa: E402
    convert_marian,
    from_marian,
    from_marian_state_dict,
    marian_permutation,
)
from qkv.model.positions import sinusoid_table  # noqa: E402
from qkv.modeldir import load_languages, load_model_dir  # noqa: E402
from qkv.runtime.runtime_options import RuntimeOptions  # noqa: E402

PAD, BOS, EOS, V = 0, 2, 3, 96
TEXTS = ["A man reads 3 newspapers in the park.", "Café crème, naïve façade: déjà vu!", "東京で2024年に会いましょう。",
         "", "12 7 2024 3.5", ">>fra<< a dog runs over green grass", "   spaces   around   ", "ÄÖÜ äöü ß où été"]


def marian(**overrides: Any) -> Any:
    """A tiny random MarianMTModel in eval mode with qkv's special ids (pad 0, decoder start 2, eos 3)."""
    kwargs: dict[str, Any] = dict(
        vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=None,
        activation_function="relu", scale_embedding=True)
    kwargs.update(overrides)
    torch.manual_seed(0)
    return transformers.MarianMTModel(transformers.MarianConfig(**kwargs)).eval()


def sources() -> Tensor:
    """(4, 9) source ids ending with eos, the last two rows right-padded."""
    src = torch.randint(4, V, (4, 9))
    src[:, -1] = EOS
    src[2, 6], src[2, 7:] = EOS, PAD
    src[3, 3], src[3, 4:] = EOS, PAD
    return src


def hf_greedy(hf: Any, src: Tensor, max_new_tokens: int) -> list[list[int]]:
    """Hugging Face greedy ids after the decoder start, up to eos (excluded); pad and bos never generated."""
    pad, eos, bos = hf.config.pad_token_id, hf.config.eos_token_id, hf.config.decoder_start_token_id
    out = hf.generate(input_ids=src, attention_mask=src.ne(pad), do_sample=False, num_beams=1,
                      max_new_tokens=max_new_tokens, suppress_tokens=sorted({pad, bos}),
                      forced_eos_token_id=None)
    return [row[: row.index(eos)] if eos in row else row for row in out[:, 1:].tolist()]


def test_the_permutation_turns_marian_positions_into_qkv_positions() -> None:
    hf = marian()
    table = hf.model.encoder.embed_positions.weight
    torch.testing.assert_close(table[:, marian_permutation(32)], sinusoid_table(64, 32), atol=1e-6, rtol=0)


@pytest.mark.parametrize("overrides", [
    {},
    {"activation_function": "gelu", "scale_embedding": False},
    {"activation_function": "swish", "decoder_start_token_id": PAD},
    {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 80, "tie_word_embeddings": False},
], ids=["relu-shared-tied", "gelu-unscaled", "swish-pad-start", "separate-untied"])
def test_logits_equal_marian(overrides: dict[str, Any]) -> None:
    hf = marian(**overrides)
    with torch.no_grad():
        hf.final_logits_bias.normal_()
    model = from_marian(hf)
    src = sources()
    tgt = torch.randint(4, 80, (4, 7))
    tgt[:, 0] = hf.config.decoder_start_token_id
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("eos_scale", [1.0, 3.0], ids=["to-max-len", "eos-early"])
@pytest.mark.parametrize("overrides", [{}, {"activation_function": "swish", "decoder_start_token_id": PAD}],
                         ids=["relu", "swish-pad-start"])
def test_greedy_ids_equal_marian_generate(eos_scale: float, overrides: dict[str, Any]) -> None:
    """A random model rarely ends; a larger eos embedding row (tied: a larger eos logit) makes it end early."""
    hf = marian(**overrides)
    with torch.no_grad():
        hf.model.shared.weight[EOS] *= eos_scale
    model = from_marian(hf)
    src = sources()
    ours = [h.tokens for h in greedy(model, src, max_len=20)]
    assert ours == hf_greedy(hf, src, max_new_tokens=20)
    assert all(len(t) == 20 for t in ours) == (eos_scale == 1.0)


def test_what_qkv_cannot_represent_is_refused() -> None:
    hf = marian()
    state = hf.state_dict()
    with pytest.raises(ValueError, match="activation_function='tanh'"):
        from_marian_state_dict({**hf.config.to_dict(), "activation_function": "tanh"}, state)
    with pytest.raises(ValueError, match="normalize_before"):
        from_marian_state_dict({**hf.config.to_dict(), "normalize_before": True}, state)
    with pytest.raises(ValueError, match="layernorm_embedding"):
        from_marian_state_dict(hf.config, {**state, "model.encoder.layernorm_embedding.weight": torch.ones(32)})
    with pytest.raises(ValueError, match="one n_heads"):
        from_marian(marian(decoder_attention_heads=2))


# --- OPUS-MT directories (conftest.py) -------------------------------------------------------------------
@pytest.fixture(scope="module", params=["shared", "separate"])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the Marian directory, its qkv model directory made by `qkv convert marian`)."""
    source = request.getfixturevalue("marian_dir" if request.param == "shared" else "marian_separate_dir")
    out = tmp_path_factory.mktemp("converted") / "qkv"
    assert main(["convert", "marian", str(source), "--out", str(out)]) == 0
    return source, out


def test_token_ids_equal_marian_tokenizer(converted: tuple[Path, Path]) -> None:
    source, out = converted
    hf_tok = transformers.MarianTokenizer.from_pretrained(source)
    tok = SubwordTokenizer.load(out)
    assert [[*ids, tok.eos_id] for ids in tok.encode_src(TEXTS)] == hf_tok(TEXTS)["input_ids"]
    assert [[*ids, tok.eos_id] for ids in tok.encode_tgt(TEXTS)] == hf_tok(text_target=TEXTS)["input_ids"]
    assert tok.unk_id == hf_tok.unk_token_id and tok.pad_id == hf_tok.pad_token_id == tok.bos_id
    if not hf_tok.separate_vocabs:  # the language token is one id, not pieces
        assert tok.encode_src([">>fra<< a dog"])[0][0] == hf_tok.convert_tokens_to_ids(">>fra<<")


def test_logits_and_greedy_ids_equal_marian(converted: tuple[Path, Path]) -> None:
    source, out = converted
    hf = transformers.MarianMTModel.from_pretrained(source).eval()
    model = load_model_dir(out)
    tok = SubwordTokenizer.load(out)
    assert model.config.activation == "silu" and model.config.output_bias and model.config.pad_id == model.config.bos_id
    texts = [t for t in TEXTS if t]
    src = pad_sequences([[*ids, tok.eos_id] for ids in tok.encode_src(texts)], tok.pad_id)  # (B, S)
    tgt = torch.randint(1, tok.pad_id, (len(texts), 6))
    tgt[:, 0] = tok.bos_id  # the decoder starts from <pad>
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=src.ne(tok.pad_id), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=0)
    ours = [h.tokens for h in greedy(model, src, max_len=20)]
    assert ours == hf_greedy(hf, src, max_new_tokens=20)
    translator = Translator.load(out)  # the text path: tokenizer, batching, decoding
    options = DecodeOptions(beam=1, max_len_a=0.0, max_len_b=20)
    assert [t.tokens for t in translator.translate_detailed(texts, options)] == ours
    int8 = Translator.load(out, RuntimeOptions(quantize="int8"))
    assert len(int8.translate(TEXTS)) == len(TEXTS)  # beam 4, int8
    assert load_languages(out) == ("en", "fr")  # from tokenizer_config.json, for `qkv serve`


def test_every_id_decodes_as_marian_tokenizer_decodes_it(converted: tuple[Path, Path]) -> None:
    """Each id of the target vocabulary alone, and random sequences of them, decode to the text of
    `MarianTokenizer.decode(ids, skip_special_tokens=True)`. A shared vocabulary (OPUS-MT's) holds the
    pieces of both SentencePiece models, so an id can be a piece that only source.spm knows ("▁city")
    or only target.spm ("▁ville"): each comes out as text, never as a raw piece."""
    source, out = converted
    hf_tok = transformers.MarianTokenizer.from_pretrained(source)
    tok = SubwordTokenizer.load(out)
    ids = [i for i in range(tok.tgt_vocab_size) if i != tok.eos_id]  # eos ends a sequence
    rng = random.Random(0)
    sequences = [[i] for i in range(tok.tgt_vocab_size)]
    sequences += [[*rng.choices(ids, k=rng.randint(2, 8)), tok.eos_id] for _ in range(300)]
    assert tok.decode_tgt(sequences) == [hf_tok.decode(seq, skip_special_tokens=True) for seq in sequences]
    if not hf_tok.separate_vocabs:
        city, ville = hf_tok.convert_tokens_to_ids(["▁city", "▁ville"])
        assert tok.tgt_sp.piece_to_id("▁city") == tok.tgt_sp.unk_id()  # a source piece only
        assert tok.src_sp.piece_to_id("▁ville") == tok.src_sp.unk_id()  # a target piece only
        assert tok.decode_tgt([[ville, city, city]]) == ["ville city city"]


def marian_copy(marian_dir: Path, tmp_path: Path, fault: str) -> Path:
    """A copy of marian_dir with `fault`."""
    copy = tmp_path / "copy"
    shutil.copytree(marian_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    if fault == "d_model-a-string":
        config["d_model"] = "32"
    elif fault == "d_model-not-the-weights":
        config["d_model"] = 64
    elif fault == "one-layer-too-many":
        config["encoder_layers"] += 1
    elif fault == "ffn-not-the-weights":
        config["encoder_ffn_dim"] = config["decoder_ffn_dim"] = 32
    elif fault == "config-a-list":
        config = [config]
    elif fault == "source.spm-truncated":
        spm_bytes = (copy / "source.spm").read_bytes()
        (copy / "source.spm").write_bytes(spm_bytes[: len(spm_bytes) // 2])
    elif fault == "target.spm-empty":
        (copy / "target.spm").write_bytes(b"")
    (copy / "config.json").write_text(json.dumps(config))
    return copy


FAULTS = {  # fault: what the one line says after the directory
    "d_model-a-string": 'config.json: "d_model" must be int, got \'32\'',
    "d_model-not-the-weights": 'config.json: "d_model" is 64, but the weights have 32 (model.shared.weight is',
    "one-layer-too-many": 'config.json: "encoder_layers" is 3, but the weights have 2',
    "ffn-not-the-weights": 'config.json: "encoder_ffn_dim" is 32, but the weights have 64',
    "config-a-list": "config.json: expected a JSON object of settings, got list",
    "source.spm-truncated": "source.spm is not a SentencePiece model",
    "target.spm-empty": "target.spm is not a SentencePiece model",
}


@pytest.mark.parametrize(("fault", "message"), FAULTS.items(), ids=list(FAULTS))
def test_a_bad_config_or_sentencepiece_file_is_one_line_and_writes_nothing(
        marian_dir: Path, tmp_path: Path, capsys, fault: str, message: str) -> None:
    copy = marian_copy(marian_dir, tmp_path, fault)
    out = tmp_path / "out"
    assert main(["convert", "marian", str(copy), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("qkv convert: error: ") and err.count("\n") == 1, err
    assert message in err and str(copy) in err
    assert not out.exists()


def test_a_directory_that_is_not_marian_is_refused_in_one_line(marian_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["convert", "marian", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["convert", "marian", str(marian_dir), "--out", str(tmp_path / "busy")]) == 2
    assert "not empty" in capsys.readouterr().err
    with pytest.raises(ValueError, match="model_type='bart'"):
        convert_marian_config_of(marian_dir, tmp_path, model_type="bart")


def convert_marian_config_of(marian_dir: Path, tmp_path: Path, **changes: Any) -> None:
    """Convert a copy of marian_dir whose config.json has `changes`."""
    copy = tmp_path / "copy"
    shutil.copytree(marian_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, **changes}))
    convert_marian(copy, tmp_path / "copy-out")


def test_weights_that_are_not_tensors_only_are_refused(marian_separate_dir: Path, tmp_path: Path) -> None:
    """pytorch_model.bin is read with torch.load(weights_only=True): a pickle of anything else never runs."""
    copy = tmp_path / "copy"
    shutil.copytree(marian_separate_dir, copy)
    torch.save({"weights": torch.ones(2), "code": Path("x")}, copy / "pytorch_model.bin")  # not tensors only
    with pytest.raises(ValueError, match=r"cannot read the tensors of .*pytorch_model\.bin"):
        convert_marian(copy, tmp_path / "out")
    (copy / "pytorch_model.bin").write_bytes(b"truncated")
    with pytest.raises(ValueError, match="cannot read the tensors"):
        convert_marian(copy, tmp_path / "out")
