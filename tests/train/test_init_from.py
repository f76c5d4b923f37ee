"""`qkv train --init_from MODEL` for translation: a run starts from the weights of a qkv model
directory, a Marian (OPUS-MT) directory or a Hub name, keeps the model's tokenizer files and shape,
and records where it started.

Oracle: `transformers` itself. The first validation (step 0) of a run from an OPUS-MT-shaped model
is the Marian model's own loss on the validation pairs (MarianMTModel with labels, no label
smoothing); a fine-tuned model exported with `qkv export marian` translates under transformers'
greedy `generate` as qkv's greedy search does.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sentencepiece as spm
import torch
from safetensors.torch import load_file, save_file

from marian_models import EN_WORDS, FR_WORDS, SHA, build_marian_dir, hub_cache, transformers
from qkv.apps.cli import main
from qkv.apps.translator import Translator
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode.options import DecodeOptions
from qkv.interop.ctranslate2 import never_generated
from qkv.interop.marian import convert_marian
from qkv.interop.marian_export import export_marian
from qkv.model import EncoderOnly
from qkv.modeldir import TOKENIZER_FILES, load_config, load_model_dir, save_model_dir
from qkv.train import Trainer, load_train_config
from qkv.train.checkpoints import checkpoint_dir
from qkv.train.freeze import group_of
from qkv.train.trainer import TRAIN_KEY

MAX_LEN = 20  # the length limit of both greedy searches compared
TOKENIZER_NAMES = [name for name in TOKENIZER_FILES if name != "spm.model"]  # separate sides


def _pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src = [" ".join(rng.choices(EN_WORDS, k=rng.randint(3, 9))) for _ in range(n)]
    tgt = [" ".join(rng.choices(FR_WORDS, k=rng.randint(3, 9))) for _ in range(n)]
    return src, tgt


def write_pairs(directory: Path, name: str, n: int, seed: int) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    src, tgt = _pairs(n, seed)
    paths = directory / f"{name}.en", directory / f"{name}.fr"
    for path, lines in zip(paths, (src, tgt), strict=True):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def marian(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_marian_dir(tmp_path_factory.mktemp("marian") / "opus-mt-en-fr", separate=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("data")
    train = write_pairs(root, "train", 60, seed=10)
    valid = write_pairs(root, "valid", 12, seed=11)
    return {"train_src": str(train[0]), "train_tgt": str(train[1]),
            "valid_src": str(valid[0]), "valid_tgt": str(valid[1])}


def fine_tune_recipe(init_from: str | Path, data: dict[str, str], **overrides: Any) -> Any:
    base: dict[str, Any] = {
        **data, "init_from": str(init_from), "max_tokens": 300, "max_steps": 3, "valid_every": 1,
        "log_every": 1, "valid_bleu": False, "valid_metric": "loss", "label_smoothing": 0.0,
        "tensorboard": False, "threads": 1, "precision": "fp32", "lr": 1e-3, "warmup": 2,
    }
    return load_train_config(None, {**base, **overrides})


def marian_valid_loss(marian: Path, data: dict[str, str]) -> float:
    """The Marian model's mean token loss (eos included) on the validation pairs, by transformers."""
    model = transformers.MarianMTModel.from_pretrained(marian).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(marian)
    src = Path(data["valid_src"]).read_text(encoding="utf-8").splitlines()
    tgt = Path(data["valid_tgt"]).read_text(encoding="utf-8").splitlines()
    total, count = 0.0, 0
    with torch.no_grad():
        for s, t in zip(src, tgt, strict=True):
            batch = tokenizer([s], text_target=[t], return_tensors="pt")
            n = batch["labels"].numel()
            total += float(model(**batch).loss) * n
            count += n
    return total / count


def first_validation(out: Path) -> dict[str, str]:
    with open(out / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["step"] == "0"
    return rows[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- starting weights, tokenizer, provenance ---------------------------------------------------
def test_a_run_from_a_marian_directory_starts_from_its_weights(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    result = Trainer(fine_tune_recipe(marian, data), tmp_path / "ft").train()
    assert result.history[0]["step"] == 0
    assert result.history[0]["valid_loss"] == pytest.approx(marian_valid_loss(marian, data), rel=1e-5)
    assert result.step == 3
    converted = convert_marian(marian, tmp_path / "converted")
    for name in TOKENIZER_NAMES:
        assert (tmp_path / "ft" / name).read_bytes() == (converted / name).read_bytes(), name
        assert (checkpoint_dir(tmp_path / "ft", 3) / name).read_bytes() == (converted / name).read_bytes()
    _, config, meta = load_config(tmp_path / "ft")
    assert config == load_config(converted)[1]  # the shape and the rest: the model's
    assert meta["init_from"] == {"name": str(marian), "revision": None,
                                 "sha256": sha256(marian / "model.safetensors")}
    assert (meta["src_lang"], meta["tgt_lang"]) == ("en", "fr")


def test_a_run_from_a_qkv_directory_starts_from_its_weights(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    source = convert_marian(marian, tmp_path / "qkv-model")
    cfg = fine_tune_recipe(source, data, model={"dropout": 0.3}, max_steps=1)
    result = Trainer(cfg, tmp_path / "ft").train()
    assert result.history[0]["valid_loss"] == pytest.approx(marian_valid_loss(marian, data), rel=1e-5)
    for name in TOKENIZER_NAMES:
        assert (tmp_path / "ft" / name).read_bytes() == (source / name).read_bytes(), name
    _, config, meta = load_config(tmp_path / "ft")
    assert config == load_config(source)[1].replace(dropout=0.3)  # dropout may change
    assert meta["init_from"]["sha256"] == sha256(source / "model.safetensors")


def qkv_cli(tmp: Path, *args: str, offline: bool = True, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_CACHE": str(tmp / "hub"), "QKV_CACHE_DIR": str(tmp / "qkv-cache"), **env_vars}
    env.pop("HF_HUB_OFFLINE", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "qkv", *args], env=env, text=True,
                          capture_output=True, timeout=300)


@pytest.mark.slow
def test_a_run_from_a_hub_name_starts_from_its_weights_offline(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    hub_cache(tmp_path / "hub", "test-org/opus-mt-tiny", marian)
    flags = [f"--{k}={v}" for k, v in data.items()]
    common = [*flags, "--max_steps", "1", "--valid_bleu", "false", "--valid_metric", "loss",
              "--label_smoothing", "0", "--precision", "fp32", "--tensorboard", "false"]
    r = qkv_cli(tmp_path, "train", "--init_from", "hf:test-org/opus-mt-tiny", "--out",
                str(tmp_path / "ft"), *common)
    assert r.returncode == 0, r.stderr
    loss = float(first_validation(tmp_path / "ft")["valid_loss"])
    assert loss == pytest.approx(marian_valid_loss(marian, data), rel=1e-5)
    meta = load_config(tmp_path / "ft")[2]
    assert meta["init_from"] == {"name": "hf:test-org/opus-mt-tiny", "revision": SHA,
                                 "sha256": sha256(marian / "model.safetensors")}
    recipe = (tmp_path / "ft" / "train_config.yaml").read_text()
    assert "lr: 0.0001" in recipe and "warmup: 100" in recipe  # the fine-tuning defaults
    assert "loss_chunk_tokens: 1024" in recipe
    r = qkv_cli(tmp_path, "train", "--init_from", "hf:test-org/absent", "--out",
                str(tmp_path / "absent"), *common)
    errors = [line for line in r.stderr.splitlines() if line.startswith("qkv train: error:")]
    assert r.returncode == 2 and len(errors) == 1 and "not in the Hugging Face cache" in errors[0]
    assert not (tmp_path / "absent").exists()


# --- refusals, before any directory is made ------------------------------------------------------
def test_a_shape_changing_model_key_is_refused_before_any_directory(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    for key, value in (("d_model", 64), ("n_encoder_layers", 3), ("activation", "relu")):
        cfg = fine_tune_recipe(marian, data, model={key: value})
        with pytest.raises(ValueError, match=f"model.{key}=.*keeps its shape"):
            Trainer(cfg, tmp_path / "ft")
        assert not (tmp_path / "ft").exists()


def test_bad_models_are_refused_in_one_line_before_any_directory(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    mlm = EncoderOnly(load_config(convert_marian(marian, tmp_path / "conv"))[1])
    save_model_dir(tmp_path / "mlm", mlm, task="mlm")
    broken = tmp_path / "broken"
    shutil.copytree(marian, broken)
    weights = load_file(broken / "model.safetensors")
    name = "model.encoder.layers.0.fc1.weight"
    weights[name][0, 0] = float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    cases = {
        tmp_path / "mlm": "holds a encoder_only model, task 'mlm'; task 'translate' starts from",
        broken: "holds NaN or infinite values",
        tmp_path / "nothing": "no such directory",
    }
    for source, message in cases.items():
        with pytest.raises(ValueError, match=message) as e:
            Trainer(fine_tune_recipe(source, data), tmp_path / "ft")
        assert "\n" not in str(e.value) and str(source) in str(e.value)
        assert not (tmp_path / "ft").exists()


def test_a_recipes_case_that_is_not_the_tokenizers_is_refused_before_any_directory(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    """The run keeps the model's tokenizer, which decides the case: `lowercase` left out follows
    it, and a `lowercase` that says otherwise is refused in one line."""
    cased = convert_marian(marian, tmp_path / "cased")
    lower = tmp_path / "lower"
    shutil.copytree(cased, lower)
    config = json.loads((lower / "tokenizer.json").read_text())
    (lower / "tokenizer.json").write_text(json.dumps({**config, "lowercase": True}))
    cases = [(cased, True, "is cased (it reads and writes text as it is)"), (marian, True, "is cased"),
             (lower, False, "is lowercase")]
    for source, lowercase, message in cases:
        with pytest.raises(ValueError, match=rf"^lowercase: {str(lowercase).lower()}: the tokenizer "
                           rf"of init_from {re.escape(str(source))} {re.escape(message)}.*decides the "
                           "case") as e:
            Trainer(fine_tune_recipe(source, data, lowercase=lowercase), tmp_path / "ft")
        assert "\n" not in str(e.value)
        assert not (tmp_path / "ft").exists()
    trainer = Trainer(fine_tune_recipe(lower, data), tmp_path / "ft")  # lowercase left out
    assert trainer.cfg.lowercase is None and trainer.task.tokenizer.lowercase
    Trainer(fine_tune_recipe(cased, data, lowercase=False), tmp_path / "ft-cased")  # the same: fine
    with pytest.raises(ValueError, match="lowercase must be true or false"):
        load_train_config(None, {**data, "lowercase": None})


def test_mismatched_mix_sides_and_an_unreachable_hub_are_one_line_before_any_directory(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    general_src, general_tgt = write_pairs(tmp_path / "general", "general", 5, seed=13)
    general_tgt.write_text("".join(general_tgt.read_text().splitlines(True)[:4]))
    cfg = fine_tune_recipe(marian, data, mix_src=str(general_src), mix_tgt=str(general_tgt), mix_ratio=0.2)
    with pytest.raises(ValueError, match=rf"{re.escape(str(general_src))}.* 5 .*4") as e:
        Trainer(cfg, tmp_path / "ft")
    assert "\n" not in str(e.value) and not (tmp_path / "ft").exists()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = [f"--{k}={v}" for k, v in data.items()]
    r = qkv_cli(tmp_path, "train", "--init_from", "hf:test-org/opus-mt-tiny", "--out", str(tmp_path / "ft"),
                *flags, offline=False, HF_ENDPOINT=f"http://127.0.0.1:{port}")
    lines = [line for line in r.stderr.splitlines() if not line.startswith("allocator: ")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr  # no retries logged
    assert lines[0].startswith("qkv train: error: test-org/opus-mt-tiny is not in the Hugging Face cache")
    assert "the Hub cannot be reached" in lines[0] and not (tmp_path / "ft").exists()


# --- resume and export ---------------------------------------------------------------------------
def test_a_fine_tune_resumes_exactly(marian: Path, data: dict[str, str], tmp_path: Path) -> None:
    dropout = {"model": {"dropout": 0.1}}
    Trainer(fine_tune_recipe(marian, data, max_steps=5, **dropout), tmp_path / "full").train()
    Trainer(fine_tune_recipe(marian, data, max_steps=2, **dropout), tmp_path / "split").train()
    result = Trainer(fine_tune_recipe(marian, data, max_steps=5, **dropout), tmp_path / "split",
                     resume=True).train()
    assert result.step == 5 and [h["step"] for h in result.history] == [0, 1, 2, 3, 4, 5]
    full = load_file(checkpoint_dir(tmp_path / "full", 5) / "model.safetensors")
    split = load_file(checkpoint_dir(tmp_path / "split", 5) / "model.safetensors")
    assert full.keys() == split.keys()
    for name in full:
        assert torch.equal(full[name], split[name]), name


@pytest.fixture(scope="module")
def fine_tune(marian: Path, data: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory fine-tuned for 4 updates from the OPUS-MT-shaped model."""
    out = tmp_path_factory.mktemp("fine-tune") / "ft"
    Trainer(fine_tune_recipe(marian, data, max_steps=4), out).train()
    return out


def test_an_exported_fine_tune_translates_as_qkv_does(
    marian: Path, fine_tune: Path, tmp_path: Path
) -> None:
    """transformers' greedy `generate` of the Marian export is qkv's greedy search, and the export
    keeps OPUS-MT's conventions: swish, scaled embeddings, the trained final_logits_bias, pad =
    decoder start (the last id), eos 0, and the joint vocab.json with the model's own ids."""
    export_marian(fine_tune, tmp_path / "exported")
    texts = _pairs(6, seed=12)[0]
    model = transformers.MarianMTModel.from_pretrained(tmp_path / "exported").eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "exported")
    theirs = []
    for text in texts:
        batch = tokenizer([text], return_tensors="pt")
        row = model.generate(**batch, num_beams=1, do_sample=False,
                             max_length=batch["input_ids"].size(1) + 51)[0]
        theirs.append(tokenizer.decode(row, skip_special_tokens=True))
    ours = Translator.load(fine_tune).translate(texts, DecodeOptions(beam=1))
    assert ours == theirs
    assert SubwordTokenizer.load(fine_tune).src_vocab_size == tokenizer.vocab_size
    exported = json.loads((tmp_path / "exported" / "config.json").read_text())
    original = json.loads((marian / "config.json").read_text())
    keys = ("model_type", "activation_function", "scale_embedding", "pad_token_id",
            "decoder_start_token_id", "eos_token_id", "share_encoder_decoder_embeddings")
    assert {k: exported.get(k) for k in keys} == {k: original.get(k) for k in keys}
    assert exported["activation_function"] == "swish" and exported["scale_embedding"] is True
    assert exported["decoder_start_token_id"] == exported["pad_token_id"] == original["vocab_size"] - 1
    vocab = json.loads((tmp_path / "exported" / "vocab.json").read_text())
    assert vocab == json.loads((marian / "vocab.json").read_text())
    assert not (tmp_path / "exported" / "target_vocab.json").exists()
    bias = load_file(tmp_path / "exported" / "model.safetensors")["final_logits_bias"]
    trained = load_file(checkpoint_dir(fine_tune, 4) / "model.safetensors")
    start = load_file(marian / "model.safetensors")["final_logits_bias"]
    assert torch.equal(bias[0], trained["output_projection.bias"])
    assert not torch.equal(bias, start)  # the fine-tune's, not the starting model's


def test_a_fine_tune_exported_to_ctranslate2_translates_as_qkv_greedy(
    fine_tune: Path, tmp_path: Path
) -> None:
    """`qkv export ctranslate2` of the fine-tune: CTranslate2's greedy search, driven as the
    export's README says (qkv's never-written tokens suppressed, its text written by the README's
    expression), gives qkv's greedy tokens and texts. The model writes pieces that only the
    source side's SentencePiece model holds (one vocabulary for both sides), as OPUS-MT does."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(fine_tune), "--out", str(out)]) == 0
    readme = (out / "README.md").read_text(encoding="utf-8")
    detokenize = re.search(r"print\(\[(.*) for tokens in best\]\)", readme).group(1)
    texts = _pairs(8, seed=12)[0]
    source = spm.SentencePieceProcessor(model_file=str(out / "source.spm"))
    target = spm.SentencePieceProcessor(model_file=str(out / "target.spm"))
    model, tokenizer = load_model_dir(fine_tune), SubwordTokenizer.load(fine_tune)
    results = ctranslate2.Translator(str(out), device="cpu").translate_batch(
        [source.encode(text, out_type=str) for text in texts], beam_size=1,
        min_decoding_length=0, max_decoding_length=MAX_LEN,
        suppress_sequences=never_generated(model, tokenizer))
    pieces = [r.hypotheses[0] for r in results]
    options = DecodeOptions(beam=1, max_len_a=0, max_len_b=MAX_LEN)
    ours = list(Translator.load(fine_tune).translate_stream(texts, options))
    vocabulary = tokenizer.tgt_vocabulary()
    assert [[vocabulary[i] for i in r.tokens] for r in ours] == pieces
    theirs = [eval(detokenize, {"target": target, "tokens": tokens}) for tokens in pieces]
    assert [r.text for r in ours] == theirs
    assert any(theirs)  # not all empty: the comparison says something
    assert any(p not in target.id_to_piece(list(range(len(target)))) for t in pieces for p in t)


# --- freezing ----------------------------------------------------------------------------------
def test_frozen_parts_leave_training_bit_for_bit(marian: Path, data: dict[str, str], tmp_path: Path) -> None:
    start = load_file(convert_marian(marian, tmp_path / "conv") / "model.safetensors")
    cfg = fine_tune_recipe(marian, data, freeze="embeddings,encoder", max_steps=3)
    assert cfg.freeze == ("embeddings", "encoder")
    Trainer(cfg, tmp_path / "ft").train()
    end = load_file(checkpoint_dir(tmp_path / "ft", 3) / "model.safetensors")
    assert end.keys() == start.keys()
    groups = {name: group_of(name) for name in start}
    assert {"embeddings", "encoder", "decoder", "output"} <= set(groups.values())
    for name, group in groups.items():
        if group in ("embeddings", "encoder"):
            assert torch.equal(end[name], start[name]), name
        else:
            assert not torch.equal(end[name], start[name]), name  # trained


def test_freeze_names_known_parts(marian: Path, data: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="freeze: no part 'attention'; choose from embeddings"):
        fine_tune_recipe(marian, data, freeze="attention")


# --- the tokenizer's coverage of the new data -----------------------------------------------------
def test_the_tokenizers_coverage_is_logged_and_a_script_it_lacks_refused(
    marian: Path, data: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="qkv.train")
    Trainer(fine_tune_recipe(marian, data, max_steps=1), tmp_path / "ft")
    lines = [r.getMessage() for r in caplog.records if "unknown pieces" in r.getMessage()]
    assert len(lines) == 1 and "0.00% (source), 0.00% (target); pieces per character" in lines[0]
    greek = dict(data)
    greek["train_tgt"] = str(tmp_path / "train.el")
    n = len(Path(data["train_src"]).read_text(encoding="utf-8").splitlines())
    Path(greek["train_tgt"]).write_text("ένας άνθρωπος διαβάζει\n" * n, encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot encode the training data: .*% of the target "
                       r"pieces are unknown \(max_unk_rate 0.01\); its vocabulary lacks .*'ά'") as e:
        Trainer(fine_tune_recipe(marian, greek), tmp_path / "greek")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "greek").exists()


# --- mixing in general-domain pairs ------------------------------------------------------------
def test_general_pairs_are_mixed_in_at_the_ratio_over_a_run(
    marian: Path, data: dict[str, str], tmp_path: Path
) -> None:
    """60 domain pairs and mix_ratio 0.25: 20 general pairs in each epoch, drawn afresh from 30,
    so over a run of 3 epochs one pair in four that training reads is a general one."""
    general_src, general_tgt = write_pairs(tmp_path / "general", "general", 30, seed=13)
    cfg = fine_tune_recipe(marian, data, mix_src=str(general_src), mix_tgt=str(general_tgt),
                           mix_ratio=0.25, max_epochs=3, max_steps=1000, valid_every=1000)
    trainer = Trainer(cfg, tmp_path / "ft")
    n = len(trainer.data.train_src)
    general_ids = set(map(tuple, trainer.task.general.src))
    seen: dict[int, list[tuple[int, ...]]] = {}  # epoch -> the general pairs' source ids read
    read = {"domain": 0, "general": 0}
    collate = trainer.task.collate

    def counting(examples: Any, indices: list[int], key: Any) -> Any:
        for i in indices if key[0] == TRAIN_KEY else []:
            read["general" if i >= n else "domain"] += 1
            if i >= n:
                assert tuple(examples[0][i]) in general_ids
                seen.setdefault(key[1], []).append(tuple(examples[0][i]))
        return collate(examples, indices, key)

    trainer.task.collate = counting  # type: ignore[method-assign]
    trainer.train()
    assert n == 60 and read == {"domain": 3 * 60, "general": 3 * 20}
    assert sorted(seen) == [0, 1, 2] and all(len(set(v)) == 20 for v in seen.values())
    assert seen[0] != seen[1]  # a sample drawn afresh each epoch


def test_mixing_needs_both_sides_and_a_ratio(marian: Path, data: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="mix_src and mix_tgt go together"):
        fine_tune_recipe(marian, data, mix_src="general.en", mix_ratio=0.2)
    with pytest.raises(ValueError, match=r"mix_ratio must be in \(0, 1\)"):
        fine_tune_recipe(marian, data, mix_src="general.en", mix_tgt="general.fr")
