"""TransformerConfig: presets, overrides, round-trip, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv import TransformerConfig


def test_presets_match_the_paper() -> None:
    base = TransformerConfig.preset("base")
    assert (base.n_encoder_layers, base.d_model, base.d_ff, base.n_heads, base.dropout) == (6, 512, 2048, 8, 0.1)
    big = TransformerConfig.preset("big", d_ff=1234)
    assert (big.d_model, big.n_heads, big.dropout, big.d_ff) == (1024, 16, 0.3, 1234)
    assert TransformerConfig.preset("tiny").d_model < 128


def test_round_trip() -> None:
    cfg = TransformerConfig.preset("tiny", positional="rope", n_kv_heads=2, norm_first=True)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("overrides,message", [
    ({"d_model": 100, "n_heads": 8}, "not divisible by n_heads"),
    ({"positional": "rope", "d_model": 36, "n_heads": 4}, "even head size"),
    ({"n_kv_heads": 3}, "multiple of n_kv_heads"),
    ({"dropout": 1.5}, "dropout must be in"),
    ({"positional": "absolute"}, "positional='absolute'"),
    ({"tgt_vocab_size": 9000}, "share_embeddings needs one vocabulary"),
    ({"pad_id": 3}, "special ids must differ"),
])
def test_impossible_combinations_raise(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransformerConfig.preset("base", **overrides)


def test_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.from_dict({"d_modle": 512})
    with pytest.raises(ValueError, match="unknown preset"):
        TransformerConfig.preset("huge")


def test_a_notes_field_in_a_model_config_is_skipped_and_never_written() -> None:
    cfg = TransformerConfig.from_dict({**TransformerConfig().to_dict(), "extra": {"data": "m30k"}})
    assert cfg == TransformerConfig() and "extra" not in cfg.to_dict()


def test_qkv_cache_dir_holds_the_corpora_the_hub_models_and_the_decoding_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qkv.config import cache_dir
    from qkv.data.named import resolve_data_dir
    from qkv.runtime.measure import cache_file

    monkeypatch.delenv("QKV_DATA_DIR", raising=False)
    monkeypatch.setenv("QKV_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    assert resolve_data_dir() == tmp_path / "data"
    assert cache_file() == tmp_path / "decoding-paths.json"
    monkeypatch.delenv("QKV_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "qkv"
