"""Named corpora: where they are looked for, what users are told when they are not there, and downloads.

No test touches the network: downloads read `file://` URLs.
"""

import dataclasses
import gzip
import hashlib
import re
from pathlib import Path

import pytest

from qkv.data import named
from qkv.data.corpus import DataError, read_lines
from qkv.data.named import (
    CORPORA,
    MULTI30K,
    download,
    get_corpus,
    load_named,
    named_paths,
    resolve_data_dir,
    tokenized_reference_path,
    verify,
)


@pytest.fixture
def no_data_env(monkeypatch, tmp_path):
    """No QKV_* variables from the caller's shell, and a cache folder inside tmp_path."""
    monkeypatch.delenv("QKV_DATA_DIR", raising=False)
    monkeypatch.setenv("QKV_CACHE_DIR", str(tmp_path / "cache"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- where the data is looked for ---


def test_resolve_data_dir_prefers_argument_then_env_then_cache(monkeypatch, tmp_path, no_data_env):
    assert resolve_data_dir(None) == tmp_path / "cache" / "data"
    monkeypatch.setenv("QKV_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir(None) == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"


def test_default_cache_is_in_the_home_folder(monkeypatch, no_data_env):
    monkeypatch.delenv("QKV_CACHE_DIR")
    assert resolve_data_dir(None) == Path.home() / ".cache" / "qkv" / "data"


# --- the registry ---


@pytest.mark.parametrize("corpus", CORPORA.values(), ids=list(CORPORA))
def test_registry_has_a_digest_for_every_file(corpus):
    expected = {
        f"{split}.{suffix}.gz" for split in corpus.splits for suffix in (*corpus.langs, *corpus.companions)
    }
    expected |= {f"tok/{split}.lc.norm.tok.{lang}" for split in corpus.tok_splits for lang in corpus.langs}
    assert set(corpus.sha256) == expected
    assert all(len(digest) == 64 and int(digest, 16) >= 0 for digest in corpus.sha256.values())


@pytest.mark.parametrize(
    ("rel", "url"),
    [
        (
            "train.de.gz",
            "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/train.de.gz",
        ),
        (
            "tok/val.lc.norm.tok.en",
            "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/tok/val.lc.norm.tok.en",
        ),
    ],
)
def test_multi30k_urls_point_at_the_official_repository(rel, url):
    assert MULTI30K.url(rel) == url


# --- what users are told ---

BAD_NAMES = [
    # (name, split, src, tgt, expected message)
    ("wmt14", "train", "de", "en", "unknown corpus 'wmt14'; known corpora: multi30k, tatoeba-zh-en"),
    ("multi30k", "dev", "de", "en", "multi30k has no split 'dev'; choose from: train, val, test_2016_flickr"),
    ("multi30k", "train", "es", "en", "multi30k has no language 'es'; choose from: de, en, fr, cs"),
    ("tatoeba-zh-en", "valid", "en", "cmn", "tatoeba-zh-en has no language 'cmn'; choose from: en, zh"),
    ("multi30k", "train", "en", "en", "source and target language are both 'en'"),
]


@pytest.mark.parametrize(("name", "split", "src", "tgt", "message"), BAD_NAMES)
def test_unknown_names_list_the_valid_ones(tmp_path, name, split, src, tgt, message):
    with pytest.raises(DataError) as error:
        load_named(name, split, src, tgt, data_dir=tmp_path)
    assert str(error.value) == message


def test_missing_files_say_how_to_provide_them(tmp_path):
    with pytest.raises(DataError) as error:
        load_named("multi30k", "val", "de", "en", data_dir=tmp_path)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'multi30k' / 'val.de.gz'} not found.")
    for hint in ("--data-dir", "QKV_DATA_DIR", "--download", MULTI30K.url("val.de.gz")):
        assert hint in message


def test_tatoeba_cannot_be_downloaded(tmp_path):
    with pytest.raises(DataError, match="tatoeba-zh-en cannot be downloaded by qkv") as error:
        load_named("tatoeba-zh-en", "train", "en", "zh", data_dir=tmp_path, download=True)
    assert "CC-BY 2.0 FR" in str(error.value)
    assert "--data-dir" in str(error.value)


@pytest.mark.parametrize(
    ("name", "split", "available"),
    [("multi30k", "train", "val, test_2016_flickr"), ("tatoeba-zh-en", "test", "none")],
)
def test_tokenized_reference_only_where_published(tmp_path, name, split, available):
    with pytest.raises(DataError) as error:
        tokenized_reference_path(name, split, "en", data_dir=tmp_path)
    expected = f"{name} has no tokenized reference for split {split!r} (available for: {available})"
    assert str(error.value) == expected


def test_verify_needs_at_least_one_file(tmp_path):
    with pytest.raises(DataError, match="no file of multi30k found in"):
        verify("multi30k", tmp_path)


def test_verify_reports_expected_and_actual_digest(tmp_path):
    path = tmp_path / "multi30k" / "val.en.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(b"not the official file\n"))
    with pytest.raises(DataError) as error:
        verify("multi30k", tmp_path)
    assert str(error.value).startswith(
        f"{path}: sha256 mismatch (expected {MULTI30K.sha256['val.en.gz']}, got {sha256(path)})"
    )


# --- downloads (file:// URLs only) ---


def test_download_verifies_and_moves_into_place(tmp_path):
    source = tmp_path / "remote.txt"
    source.write_bytes(b"hello\n")
    dest = tmp_path / "cache" / "sub" / "local.txt"
    assert download(source.as_uri(), dest, sha256(source)) == dest
    assert dest.read_bytes() == b"hello\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["local.txt"]


def test_download_with_a_wrong_checksum_leaves_nothing_behind(tmp_path):
    source = tmp_path / "remote.txt"
    source.write_bytes(b"tampered\n")
    dest = tmp_path / "cache" / "local.txt"
    wrong = "0" * 64
    with pytest.raises(DataError) as error:
        download(source.as_uri(), dest, wrong)
    url = source.as_uri()
    assert str(error.value) == f"sha256 mismatch for {url}: expected {wrong}, got {sha256(source)}"
    assert list(dest.parent.iterdir()) == []


def test_download_of_an_unreachable_url(tmp_path):
    url = (tmp_path / "nowhere.gz").as_uri()
    with pytest.raises(DataError, match=f"could not download {re.escape(url)}"):
        download(url, tmp_path / "dest.gz", "0" * 64)
    assert not (tmp_path / "dest.gz").exists()


@pytest.mark.data
def test_load_named_downloads_missing_files(monkeypatch, tmp_path, shared_data):
    """With download=True, missing files are fetched (here from a file:// mirror of the official files)."""
    mirror = dataclasses.replace(MULTI30K, url=lambda rel: (shared_data / "multi30k" / rel).as_uri())
    monkeypatch.setitem(CORPORA, "multi30k", mirror)
    corpus = load_named("multi30k", "val", "de", "en", data_dir=tmp_path, download=True, verify=True)
    assert len(corpus) == 1014
    ref = tokenized_reference_path("multi30k", "val", "en", data_dir=tmp_path, download=True)
    assert ref == tmp_path / "multi30k" / "tok" / "val.lc.norm.tok.en"
    assert len(verify("multi30k", tmp_path)) == 3


def test_download_is_not_called_for_present_files(monkeypatch, tmp_path):
    for lang in ("de", "en"):
        path = tmp_path / "multi30k" / f"val.{lang}.gz"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(gzip.compress(b"x\n"))
    monkeypatch.setattr(named, "download", lambda *args: pytest.fail(f"unexpected download {args}"))
    assert named_paths("multi30k", "val", "de", "en", data_dir=tmp_path, download=True)[0].is_file()


# --- the real corpora in ../shared/data ---


@pytest.mark.data
@pytest.mark.parametrize(
    ("name", "split", "src", "tgt", "size", "first"),
    [
        ("multi30k", "train", "de", "en", 29000, "Zwei junge weiße Männer sind"),
        ("multi30k", "test_2016_flickr", "en", "fr", 1000, None),
        ("tatoeba-zh-en", "train", "zh", "en", 26155, "嗨。"),
        ("tatoeba-zh-en", "valid", "en", "zh", 1000, None),
    ],
)
def test_load_named_from_shared_data(shared_data, name, split, src, tgt, size, first):
    corpus = load_named(name, split, src, tgt, data_dir=shared_data)
    assert len(corpus) == size
    assert first is None or corpus.src[0].startswith(first)


@pytest.mark.data
def test_data_dir_from_the_environment(monkeypatch, shared_data):
    monkeypatch.setenv("QKV_DATA_DIR", str(shared_data))
    src, tgt = named_paths("multi30k", "val", "en", "cs")
    assert (src, tgt) == (shared_data / "multi30k" / "val.en.gz", shared_data / "multi30k" / "val.cs.gz")


@pytest.mark.data
@pytest.mark.parametrize("name", CORPORA)
def test_shared_copies_match_the_recorded_digests(shared_data, name):
    assert len(verify(name, shared_data)) == len(get_corpus(name).sha256)


@pytest.mark.data
def test_tokenized_reference_is_aligned_with_the_raw_split(shared_data):
    path = tokenized_reference_path("multi30k", "test_2016_flickr", "de", data_dir=shared_data)
    assert len(read_lines(path)) == 1000
    assert read_lines(path)[0] == read_lines(path)[0].lower()


def test_tatoeba_requires_its_attribution_file(tmp_path):
    for lang in ("en", "zh"):
        path = tmp_path / "tatoeba-zh-en" / f"test.{lang}.gz"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(gzip.compress(b"x\n"))
    with pytest.raises(DataError, match=r"test\.attribution\.gz not found"):
        load_named("tatoeba-zh-en", "test", "en", "zh", data_dir=tmp_path)
