"""Named corpora: well-known data sets by name, read from a local folder, downloaded if possible.

Files live at `<data_dir>/<name>/<file>`, e.g. `<data_dir>/multi30k/train.de.gz`. The data folder is
the `data_dir` argument (the CLI's `--data-dir`), else the `QKV_DATA_DIR` environment variable, else
the user cache `~/.cache/qkv/data` (`$QKV_CACHE_DIR/data` when that variable is set). Nothing is
guessed beyond that, and nothing is downloaded unless asked for. Every file has a recorded sha256:
downloads are always checked, local copies when asked (`verify`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from qkv.config import cache_dir
from qkv.data.corpus import DataError, ParallelCorpus, StrPath, load_parallel


@dataclass(frozen=True)
class NamedCorpus:
    """What qkv knows of a named corpus: its splits, languages, files and where they come from."""

    name: str
    splits: tuple[str, ...]
    langs: tuple[str, ...]
    # every file, as a path relative to `<data_dir>/<name>/`, with its digest
    sha256: Mapping[str, str]
    url: Callable[[str], str] | None  # relative path -> download URL; None: cannot be downloaded
    source: str  # where the data comes from and under which terms, shown in error messages
    # files `{split}.{companion}.gz` that must travel with each split
    companions: tuple[str, ...] = ()
    tok_splits: tuple[str, ...] = ()  # splits with official tokenized references `tok/...`


def _parse_sha256sums(text: str) -> dict[str, str]:
    """Read `sha256sum` output ("<digest>  <file>" lines) into {file: digest}."""
    return {file: digest for digest, file in (line.split() for line in text.strip().splitlines())}


# Digests of the official files, in `sha256sum` format (`sha256sum -c` can check a copy with them);
# a line is never split, however long.
_MULTI30K_SHA256SUMS = """
726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6  train.de.gz
d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f  train.en.gz
622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c  train.fr.gz
a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077  train.cs.gz
f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a  val.de.gz
14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28  val.en.gz
ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9  val.fr.gz
b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc  val.cs.gz
9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8  test_2016_flickr.de.gz
611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9  test_2016_flickr.en.gz
6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90  test_2016_flickr.fr.gz
200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1  test_2016_flickr.cs.gz
97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00  tok/val.lc.norm.tok.de
46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec  tok/val.lc.norm.tok.en
b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a  tok/val.lc.norm.tok.fr
b87ee4917f4a0f9ca6cca03e402026c9f4437dc1bd6a7dadfd2544ecfb6c5501  tok/val.lc.norm.tok.cs
c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4  tok/test_2016_flickr.lc.norm.tok.de
5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2  tok/test_2016_flickr.lc.norm.tok.en
1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836  tok/test_2016_flickr.lc.norm.tok.fr
748c8816de928732365176e5c5d2f9bbabcec9b8d4448fba2d230feb057898a7  tok/test_2016_flickr.lc.norm.tok.cs
"""  # noqa: E501

_TATOEBA_ZH_EN_SHA256SUMS = """
98109636fb2bea5a5a163b4d98c386169e3c034f529b7fb727ae43f16b0522f1  train.en.gz
ea01098b0fd928819394cf8b128f2f379b50058860c6e904fcfe7804cacdf364  train.zh.gz
876ec38fbf2f2afb2fc8a1866a997bd654457dfb902b48cae738724f5327ec43  train.attribution.gz
120b02d7517c0e16b56ca121f8aad7bdea57b777061c9d27803bc189eb88c56b  valid.en.gz
270e6afd0950efd88f77f309fa9c6ab9375c57ca43843d1f601626d724d89b99  valid.zh.gz
2a744a5cf80c4ee43af5d9c07d574e5492e6b502aa5d00da948e90eed63ab473  valid.attribution.gz
fdfa91b1ff2d5a398d0e830ee8b19b06fd544df3fb3536c95b538540c4211eb0  test.en.gz
deafa65d1df81df4ce1eeecee6efb97bb2604eade1472796c1839e84173cd24f  test.zh.gz
97ead3cf5e5a7320ead8cc9acdef049a7fabd37d9d92346e29f94f45caeb5222  test.attribution.gz
"""

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/"


def _multi30k_url(rel: str) -> str:
    """Map the local layout (`{split}.{lang}.gz`, `tok/...`) to the repository's folders.

    `{split}.{lang}.gz` is under `raw/`, `tok/...` under `tok/`.
    """
    return MULTI30K_URL + (rel if rel.startswith("tok/") else f"raw/{rel}")


MULTI30K = NamedCorpus(
    name="multi30k",
    splits=("train", "val", "test_2016_flickr"),
    langs=("de", "en", "fr", "cs"),
    url=_multi30k_url,
    source="Multi30k task 1 (Elliott et al., 2016), https://github.com/multi30k/dataset; "
    "captions derived from Flickr30k, see the repository for the terms of use",
    tok_splits=("val", "test_2016_flickr"),
    sha256=_parse_sha256sums(_MULTI30K_SHA256SUMS),
)

TATOEBA_ZH_EN = NamedCorpus(
    name="tatoeba-zh-en",
    splits=("train", "valid", "test"),
    langs=("en", "zh"),
    url=None,
    source="English-Chinese pairs from Tatoeba (tatoeba.org, the cmn.txt collection), "
    "licensed CC-BY 2.0 FR; the {split}.attribution.gz files name the sentences' authors and "
    "must be kept with any copy",
    companions=("attribution",),
    sha256=_parse_sha256sums(_TATOEBA_ZH_EN_SHA256SUMS),
)

CORPORA: dict[str, NamedCorpus] = {c.name: c for c in (MULTI30K, TATOEBA_ZH_EN)}


def resolve_data_dir(data_dir: StrPath | None = None) -> Path:
    """The named corpora's folder: `data_dir`, else `$QKV_DATA_DIR`, else `<cache_dir>/data`."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if env := os.environ.get("QKV_DATA_DIR"):
        return Path(env).expanduser()
    return cache_dir() / "data"


def get_corpus(name: str) -> NamedCorpus:
    """Look a corpus up by name."""
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; known corpora: {', '.join(CORPORA)}")
    return CORPORA[name]


def named_paths(
    name: str,
    split: str,
    src_lang: str,
    tgt_lang: str,
    data_dir: StrPath | None = None,
    download: bool = False,
) -> tuple[Path, Path]:
    """The (source, target) files of one split of a named corpus.

    Downloaded first if asked for and missing. The split's companion files (e.g. Tatoeba's
    attributions) must be present too.
    """
    corpus = get_corpus(name)
    _check_choice(corpus, "split", split, corpus.splits)
    for lang in (src_lang, tgt_lang):
        _check_choice(corpus, "language", lang, corpus.langs)
    if src_lang == tgt_lang:
        raise DataError(f"source and target language are both {src_lang!r}")
    root = resolve_data_dir(data_dir) / name
    src = _local_file(corpus, root, f"{split}.{src_lang}.gz", download)
    tgt = _local_file(corpus, root, f"{split}.{tgt_lang}.gz", download)
    for companion in corpus.companions:
        _local_file(corpus, root, f"{split}.{companion}.gz", download)
    return src, tgt


def load_named(
    name: str,
    split: str,
    src_lang: str,
    tgt_lang: str,
    data_dir: StrPath | None = None,
    download: bool = False,
    verify: bool = False,
) -> ParallelCorpus:
    """Load one split of a named corpus, e.g. `load_named("multi30k", "train", "de", "en")`.

    With `verify=True` the two files' sha256 digests are checked against the recorded ones first.
    """
    src, tgt = named_paths(name, split, src_lang, tgt_lang, data_dir, download)
    if verify:
        for path in (src, tgt):
            _check_sha256(path, CORPORA[name].sha256[path.name])
    return load_parallel(src, tgt)


def tokenized_reference_path(
    name: str, split: str, lang: str, data_dir: StrPath | None = None, download: bool = False
) -> Path:
    """The official lowercased, Moses-tokenized reference of a split.

    Published BLEU scores are computed on it.
    """
    corpus = get_corpus(name)
    if split not in corpus.tok_splits:
        available = ", ".join(corpus.tok_splits) or "none"
        raise DataError(
            f"{name} has no tokenized reference for split {split!r} (available for: {available})"
        )
    _check_choice(corpus, "language", lang, corpus.langs)
    return _local_file(
        corpus, resolve_data_dir(data_dir) / name, f"tok/{split}.lc.norm.tok.{lang}", download
    )


def verify(name: str, data_dir: StrPath | None = None) -> list[Path]:
    """Check the sha256 of every file of `name` present locally; return the files checked.

    Raises DataError on the first mismatch, or when no file of the corpus is present at all.
    """
    corpus = get_corpus(name)
    root = resolve_data_dir(data_dir) / name
    checked = []
    for rel, expected in corpus.sha256.items():
        if (root / rel).is_file():
            _check_sha256(root / rel, expected)
            checked.append(root / rel)
    if not checked:
        raise DataError(f"no file of {name} found in {root}")
    return checked


def download(url: str, dest: StrPath, sha256: str) -> Path:
    """Download `url` to `dest`, checking its sha256; `dest` appears once complete and verified.

    The data is streamed to a temporary file next to `dest`, then moved into place atomically.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise DataError(
                f"sha256 mismatch for {url}: expected {sha256}, got {digest.hexdigest()}"
            )
        os.replace(tmp, dest)
    except (OSError, http.client.HTTPException) as e:
        raise DataError(f"could not download {url}: {e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _check_choice(corpus: NamedCorpus, what: str, value: str, valid: tuple[str, ...]) -> None:
    """Reject a split or language the corpus does not have, listing those it has."""
    if value not in valid:
        raise DataError(f"{corpus.name} has no {what} {value!r}; choose from: {', '.join(valid)}")


def _local_file(corpus: NamedCorpus, root: Path, rel: str, fetch: bool) -> Path:
    """`root/rel`, downloaded first when missing and `fetch` is set.

    Otherwise a missing file raises a DataError that says what to do.
    """
    path = root / rel
    if path.is_file():
        return path
    if corpus.url is None:
        raise DataError(
            f"{path} not found, and {corpus.name} cannot be downloaded by qkv. "
            f"Obtain it ({corpus.source}), then pass --data-dir DIR or set QKV_DATA_DIR to the "
            f"folder that holds {corpus.name}/."
        )
    if not fetch:
        raise DataError(
            f"{path} not found. Pass --data-dir DIR or set QKV_DATA_DIR to a folder that holds "
            f"{corpus.name}/, or use download (--download) to fetch it from {corpus.url(rel)}."
        )
    return download(corpus.url(rel), path, corpus.sha256[rel])


def _check_sha256(path: Path, expected: str) -> None:
    """Raise DataError unless the file's sha256 is `expected`."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise DataError(
            f"{path}: sha256 mismatch (expected {expected}, got {digest.hexdigest()}); "
            "the file is damaged or not the official version"
        )
