"""Prepared training data (qkv.train.prepared_data, qkv.data.store, qkv.data.ondisk): made once,
memory-mapped, equal to encoding the files in memory, reused by fingerprint, never used
half-written."""

from __future__ import annotations

import errno
import gzip
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv.data.corpus import DataError, clean, load_parallel
from qkv.data.store import built_once
from qkv.data.tokenizer import SubwordTokenizer
from qkv.train import load_train_config, prepared_data
from qkv.train.prepared_data import filter_long, prepare_data
from qkv.train.tasks.base import fingerprint

WORDS = ["a", "man", "rides", "the", "green", "bike", "over", "grass", "in", "berlin", "with", "his", "dog", "and", "a", "cat", "runs"]


def write_corpus(folder: Path, n: int = 300, gz: bool = False) -> dict[str, str]:
    """Two line-aligned files with a few empty pairs and a few very long ones."""
    src, tgt = [], []
    for i in range(n):
        length = 60 if i % 97 == 5 else 3 + i % 9
        src.append(" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(length)))
        tgt.append(" ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(length + i % 3)))
    src[10], tgt[20] = "", "   "
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for side, lines in (("src", src), ("tgt", tgt)):
        path = folder / (f"train.{side}.gz" if gz else f"train.{side}")
        data = ("\n".join(lines) + "\n").encode()
        path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        paths[f"train_{side}"] = str(path)
    return paths


def config(files: dict[str, str], root: Path, **overrides: Any) -> Any:
    keys = {"vocab_size": 50, "preset": "tiny", "max_len": 40, "prepared_dir": str(root)}
    return load_train_config(None, {**files, **keys, **overrides})


def test_prepared_ids_equal_encoding_the_files_in_memory(tmp_path: Path, monkeypatch) -> None:
    """The oracle: read the files whole, clean, train the tokenizer on the lists, encode, filter;
    the prepared path (in chunks of 7 pairs) gives the same tokenizer, ids, pairs and
    fingerprints."""
    files = write_corpus(tmp_path / "data", gz=True)
    monkeypatch.setattr(prepared_data, "CHUNK", 7)
    data = prepare_data(config(files, tmp_path / "prep"), tmp_path / "run", train_tokenizer=True)

    corpus, report = clean(load_parallel(files["train_src"], files["train_tgt"]))
    assert report.empty == 2
    tok = SubwordTokenizer.train(corpus.src, corpus.tgt, tmp_path / "oracle", vocab_size=50,
                                 max_sentences=1_000_000)  # the recipe's tokenizer_sample
    assert tok.same_as(data.tokenizer)
    src, tgt = tok.encode_src(corpus.src), tok.encode_tgt(corpus.tgt)
    keep, too_long, _ = filter_long(src, tgt, 40, None)
    assert too_long == 4 and len(keep) == len(corpus) - 4
    assert list(data.train_src) == [src[i] for i in keep]
    assert list(data.train_tgt) == [tgt[i] for i in keep]
    assert data.rows.tolist() == keep
    assert [data.text_src[i] for i in data.rows] == [corpus.src[i] for i in keep]
    assert data.fingerprints == {
        "train_src": fingerprint([src[i] for i in keep]),
        "train_tgt": fingerprint([tgt[i] for i in keep]),
    }
    assert data.train_src.dtype == np.uint16  # a vocabulary of 50 fits in 16 bits


def count_calls(monkeypatch, owner: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_second_run_reuses_the_prepared_data(tmp_path: Path, monkeypatch) -> None:
    """Another run on the same files (another OUT) trains no tokenizer and encodes nothing; the
    copy of the tokenizer in its OUT is the first run's."""
    files = write_corpus(tmp_path / "data")
    cfg = config(files, tmp_path / "prep")
    first = prepare_data(cfg, tmp_path / "run1", train_tokenizer=True)
    trains = count_calls(monkeypatch, SubwordTokenizer, "train")
    encodes = count_calls(monkeypatch, SubwordTokenizer, "encode_src")
    second = prepare_data(cfg, tmp_path / "run2", train_tokenizer=True)
    assert trains == [] and len(encodes) == 0
    assert SubwordTokenizer.load(tmp_path / "run2").same_as(first.tokenizer)
    assert list(second.train_src) == list(first.train_src)
    # a resumed run loads its own tokenizer, and finds the same ids
    resumed = prepare_data(cfg, tmp_path / "run2", train_tokenizer=False)
    assert len(encodes) == 0 and resumed.fingerprints == first.fingerprints


def prepared_dirs(root: Path) -> set[str]:
    return {p.name.split("-")[0] for p in root.iterdir() if not p.name.startswith(".")}


def test_a_changed_file_or_setting_prepares_again(tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "data")
    root = tmp_path / "prep"
    prepare_data(config(files, root), tmp_path / "a", train_tokenizer=True)
    names = {p.name for p in root.iterdir() if not p.name.startswith(".")}
    assert prepared_dirs(root) == {"text", "tokenizer", "ids"} and len(names) == 3
    # another vocabulary: the text is reused, a tokenizer and ids are made
    prepare_data(config(files, root, vocab_size=45), tmp_path / "b", train_tokenizer=True)
    after = {p.name for p in root.iterdir() if not p.name.startswith(".")}
    assert len(after) == 5 and names < after
    # another max_len: only the ids
    prepare_data(config(files, root, max_len=30), tmp_path / "c", train_tokenizer=True)
    assert len({p.name for p in root.iterdir() if not p.name.startswith(".")}) == 6
    # one changed line: all three again
    path = Path(files["train_tgt"])
    path.write_text(path.read_text().replace("dog", "cat", 1))
    data = prepare_data(config(files, root), tmp_path / "d", train_tokenizer=True)
    assert len({p.name for p in root.iterdir() if not p.name.startswith(".")}) == 9
    assert "cat" in data.text_tgt[int(np.flatnonzero(["cat" in t for t in data.text_tgt])[0])]


def test_a_damaged_or_half_written_preparation_is_never_used(tmp_path: Path) -> None:
    """A shard truncated or edited afterwards fails its manifest and is made again; the leftovers
    of a preparation killed midway are removed by the next one."""
    files = write_corpus(tmp_path / "data")
    root = tmp_path / "prep"
    cfg = config(files, root)
    good = list(prepare_data(cfg, tmp_path / "a", train_tokenizer=True).train_src)
    ids_dir = next(root.glob("ids-*"))
    shard = ids_dir / "src.bin"
    shard.write_bytes(shard.read_bytes()[:-2])  # truncated
    leftover = root / f".{ids_dir.name}.99999.tmp"
    leftover.mkdir()
    (leftover / "src.bin").write_bytes(b"half")
    again = prepare_data(cfg, tmp_path / "b", train_tokenizer=True)
    assert list(again.train_src) == good and not leftover.exists()
    raw = bytearray(shard.read_bytes())
    raw[0] ^= 1  # edited, same size
    shard.write_bytes(bytes(raw))
    assert list(prepare_data(cfg, tmp_path / "c", train_tokenizer=True).train_src) == good


def test_two_preparations_of_the_same_data_at_once_build_it_once(tmp_path: Path) -> None:
    builds: list[int] = []

    def build(tmp: Path) -> dict[str, Any]:
        builds.append(1)
        time.sleep(0.3)
        (tmp / "x.bin").write_bytes(b"12345")
        return {"n": 5}

    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(built_once(tmp_path, "ids-k", build)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and len(results) == 2
    assert results[0] == results[1] and results[0][1]["files"]["x.bin"][0] == 5


PREPARE_IN_A_PROCESS = """
import json, os, sys, time
from pathlib import Path
from qkv.data.store import built_once
root = Path(sys.argv[1])
def build(tmp):
    (root / f"built-by-{os.getpid()}").write_text("")
    time.sleep(1.0)
    (tmp / "x.bin").write_bytes(b"12345")
    return {"n": 5}
folder, manifest = built_once(root / "prep", "ids-k", build)
print(json.dumps([str(folder), manifest["files"]["x.bin"][0]]))
"""


def test_two_processes_preparing_the_same_data_at_once_build_it_once(tmp_path: Path) -> None:
    """As two runs (or the ranks of one) do: separate processes, the lock file their only link."""
    import json
    import subprocess
    import sys

    runs = [subprocess.Popen([sys.executable, "-c", PREPARE_IN_A_PROCESS, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    answers = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert len(list(tmp_path.glob("built-by-*"))) == 1  # one built, the other waited
    assert answers[0] == answers[1] and answers[0][1] == 5


def test_bad_input_is_one_line_naming_the_file_and_line_and_leaves_nothing(tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "data")
    root = tmp_path / "prep"
    src = Path(files["train_src"])
    lines = src.read_bytes().split(b"\n")
    src.write_bytes(b"\n".join(lines[:-3]) + b"\n")  # two lines short
    with pytest.raises(DataError, match=f"^{src} has 298 lines but .*train.tgt has 300$"):
        prepare_data(config(files, root), tmp_path / "a", train_tokenizer=True)
    lines[150] = b"caf\xe9"
    src.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=rf"^{src}:151: invalid UTF-8"):
        prepare_data(config(files, root), tmp_path / "a", train_tokenizer=True)
    assert all(p.suffix == ".lock" for p in root.iterdir())  # nothing half-written is left


def test_a_full_disk_while_preparing_is_one_line_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    files = write_corpus(tmp_path / "data")
    root = tmp_path / "prep"

    def full(self: Any, texts: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(root / ".x.tmp" / "src.bin"))

    monkeypatch.setattr(prepared_data.SequenceWriter, "add_texts", full)
    with pytest.raises(DataError, match=f"cannot write prepared data under {root}: the disk is full"):
        prepare_data(config(files, root), tmp_path / "a", train_tokenizer=True)
    assert all(p.suffix == ".lock" for p in root.iterdir())


def test_an_unwritable_folder_is_one_line(tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "data")
    (tmp_path / "afile").write_text("")
    root = tmp_path / "afile" / "prep"
    with pytest.raises(DataError, match=f"cannot write prepared data under {root}: .*--prepared_dir"):
        prepare_data(config(files, root), tmp_path / "a", train_tokenizer=True)



def test_a_read_only_folder_is_one_line_and_nothing_is_written(tmp_path: Path, monkeypatch) -> None:
    """A folder this user may not write (what chmod a-w gives a user other than root, which the
    tests may run as: the refusal is made here as the kernel makes it, EACCES on the folder)."""
    files = write_corpus(tmp_path / "data")
    root = tmp_path / "prep"
    root.mkdir()
    real_open = open

    def refused(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).parent == root:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refused)
    with pytest.raises(DataError, match=f"^cannot write prepared data under {root}: Permission denied"):
        prepare_data(config(files, root), tmp_path / "a", train_tokenizer=True)
    monkeypatch.undo()
    assert list(root.iterdir()) == []
