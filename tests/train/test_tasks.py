"""A decoder-only language model, masked-token pretraining and a classifier, trained by the one
trainer (the loop, checkpoints and exact resume of translation) and used from the command line."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from qkv import DecoderOnly, TransformerConfig
from qkv.apps.classifier import Classifier
from qkv.apps.cli import main
from qkv.apps.generator import GENERATE, Generator
from qkv.data.tokenizer import SubwordTokenizer
from qkv.decode.search import beam_search
from qkv.model.rnn import RNNSearch
from qkv.modeldir import load_config, load_model_dir
from qkv.train import TrainConfig, Trainer
from qkv.train.tasks import LanguageModelTask, TextData, accuracy_and_macro_f1, mask_tokens

Recipe = Callable[..., TrainConfig]

SUBJECTS = ["a dog", "the cat", "a man", "two girls", "the dog", "a cat"]
VERBS = ["runs", "sleeps", "jumps", "plays", "sits"]
PLACES = ["in the park", "on the grass", "at home", "near the river"]
SENTENCES = [f"{s} {v} {p}" for s in SUBJECTS for v in VERBS for p in PLACES]  # 120


def label_of(sentence: str) -> str:
    return next((animal for animal in ("dog", "cat") if animal in sentence), "person")


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def tiny_lm() -> DecoderOnly:
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=30, d_model=32, n_heads=2, d_ff=64)
    return DecoderOnly(cfg).eval()


# --- the language model ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_lm_loss_is_the_hand_computed_shifted_cross_entropy(epsilon: float) -> None:
    """The lm task's batch and loss == sum over every text of -log p(next token | the tokens before), with
    [bos] first and [eos] last, each text alone in float64 (label smoothing: (1 - eps) nll + eps mean -log p)."""
    model = tiny_lm()
    task = LanguageModelTask(SimpleNamespace(label_smoothing=epsilon, loss_chunk_tokens=None, init_from=None))  # type: ignore[arg-type]
    texts = [[5, 9, 7, 11, 4], [6, 8], [12]]
    task.data = TextData(SimpleNamespace(pad_id=0, bos_id=2, eos_id=3), texts, [])  # type: ignore[arg-type]
    batch = task.collate(texts, [0, 1, 2], (0, 0, 0, 0))
    with torch.no_grad():
        loss, nll = task.loss_module(model)(*task.loss_inputs(batch))
    want_loss = want_nll = torch.zeros((), dtype=torch.float64)
    for text in texts:
        seq = [2, *text, 3]
        with torch.no_grad():
            logp = model(torch.tensor([seq[:-1]]))[0].double().log_softmax(-1)  # (T, V)
        for t in range(len(seq) - 1):
            token_nll = -logp[t, seq[t + 1]]
            want_nll = want_nll + token_nll
            want_loss = want_loss + (1 - epsilon) * token_nll + epsilon * -logp[t].mean()
    assert task.count(batch) == sum(len(t) + 1 for t in texts)
    assert float(nll) == pytest.approx(float(want_nll), rel=1e-5)
    assert float(loss) == pytest.approx(float(want_loss), rel=1e-5)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> SubwordTokenizer:
    return SubwordTokenizer.train(SENTENCES, [], tmp_path_factory.mktemp("tok"), vocab_size=30)


def test_generate_with_the_cache_equals_generation_by_full_recomputation(tokenizer: SubwordTokenizer) -> None:
    """Greedy and sampled continuations, prompts of several lengths (and an empty one) decoded in groups: the
    key/value cache changes nothing, and a prompt decoded with others gets the continuation it gets alone."""
    generator = Generator(tiny_lm(), tokenizer)
    prompts = ["a dog", "the cat sleeps", "", "a man runs in", "two girls"]
    for options in (GENERATE.replace(max_len_b=8, min_len=8), GENERATE.replace(max_len_b=8, sampling=True,
                                                                               top_k=10, seed=3)):
        cached = generator.generate(prompts, options)
        assert generator.generate(prompts, options, use_cache=False) == cached
    greedy = GENERATE.replace(max_len_b=8, min_len=8)
    assert [generator.generate([p], greedy)[0] for p in prompts] == generator.generate(prompts, greedy)


# --- masked-token pretraining ---------------------------------------------------------------------------------
def test_mlm_masking_follows_80_10_10_and_never_touches_padding_or_specials() -> None:
    """Over ~20k chosen tokens: 15% of each row's real tokens (rounded, at least one) are chosen; 80% of them
    become [MASK], 10% a random ordinary token, 10% stay; pad, bos and eos are never chosen."""
    g = torch.Generator().manual_seed(0)
    vocab, mask_id = 100, 100
    rows = []
    for n in torch.randint(1, 60, (5000,), generator=g).tolist():
        tokens = torch.randint(4, vocab, (n,), generator=g)
        rows.append([2, *tokens.masked_fill(tokens == 4, 1).tolist(), 3])  # unk (1) is a token too
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows], batch_first=True)  # pad 0
    inputs, targets = mask_tokens(ids, mask_id, (0, 2, 3), vocab, torch.Generator().manual_seed(1))
    chosen = targets != 0
    special = (ids == 0) | (ids == 2) | (ids == 3)
    assert not (chosen & special).any()
    assert torch.equal(inputs[~chosen], ids[~chosen]) and torch.equal(targets[chosen], ids[chosen])
    n_real = (~special).sum(1)
    assert torch.equal(chosen.sum(1), (0.15 * n_real).round().clamp(min=1).long())
    assert chosen.sum() / n_real.sum() == pytest.approx(0.15, abs=0.01)
    masked = (inputs == mask_id) & chosen
    kept = (inputs == ids) & chosen
    replaced = chosen & ~masked & ~kept
    n = int(chosen.sum())
    assert n > 20_000
    assert masked.sum() / n == pytest.approx(0.8, abs=0.01)
    assert replaced.sum() / n == pytest.approx(0.1 * 95 / 96, abs=0.01)  # 1 in 96 random draws is the token
    assert kept.sum() / n == pytest.approx(0.1 + 0.1 / 96, abs=0.01)
    assert bool((inputs[replaced] >= 4).all() and (inputs[replaced] < vocab).all())  # never a special or [MASK]
    again, _ = mask_tokens(ids, mask_id, (0, 2, 3), vocab, torch.Generator().manual_seed(1))
    assert torch.equal(again, inputs)  # the generator decides every draw


def test_mlm_batches_of_the_trainer_spare_the_specials(tmp_path: Path, recipe: Recipe) -> None:
    trainer = Trainer(recipe(task="mlm", corpus=None, train_text=str(write_lines(tmp_path / "t.txt", SENTENCES))),
                      tmp_path / "run")
    batch = next(trainer._batches())
    tok = trainer.task.tokenizer
    assert trainer.task.mask_id == tok.src_vocab_size == trainer.model.config.src_vocab_size - 1
    chosen = batch.targets != tok.pad_id
    assert bool(chosen.any(1).all()) and trainer.task.count(batch) == int(chosen.sum())
    for special in (tok.pad_id, tok.bos_id, tok.eos_id):
        position = batch.inputs == special
        assert not (chosen & position).any()


# --- classification -------------------------------------------------------------------------------------------
def test_accuracy_and_macro_f1_by_hand() -> None:
    # class 0: tp 1, fp 1, fn 1 -> 0.5; class 1: tp 1, fp 0, fn 1 -> 2/3; class 2: tp 0, fp 1, fn 0 -> 0
    accuracy, f1 = accuracy_and_macro_f1([0, 0, 1, 2], [0, 1, 1, 0])
    assert accuracy == 0.5 and f1 == pytest.approx((0.5 + 2 / 3 + 0) / 3)


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_the_classifier_overfits_a_tiny_tsv(tmp_path: Path, recipe: Recipe, pooling: str) -> None:
    lines = SENTENCES[::10]  # 12 sentences, 3 labels
    tsv = write_lines(tmp_path / "tiny.tsv", [f"{s}\t{label_of(s)}" for s in lines])
    cfg = recipe(task="classify", corpus=None, train_tsv=str(tsv), valid_tsv=str(tsv), valid_metric="accuracy",
                 max_steps=60, valid_every=30, lr=3e-3, warmup=5, model={"dropout": 0.0, "attention_dropout": 0.0, "pooling": pooling})
    result = Trainer(cfg, tmp_path / "run").train()
    assert result.best_metric == 1.0
    classifier = Classifier.load(tmp_path / "run")
    assert classifier.classify(lines) == [label_of(s) for s in lines]
    with open(tmp_path / "run" / "log.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["valid_loss"]]
    assert float(rows[-1]["valid_accuracy"]) == 1.0 and float(rows[-1]["valid_macro_f1"]) == 1.0
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["labels"] == ["cat", "dog", "person"] and meta["model"]["pooling"] == pooling


def test_a_classifier_starts_from_the_mlm_models_encoder(tmp_path: Path, recipe: Recipe) -> None:
    text = write_lines(tmp_path / "t.txt", SENTENCES)
    Trainer(recipe(task="mlm", corpus=None, train_text=str(text), max_steps=3), tmp_path / "mlm").train()
    tsv = write_lines(tmp_path / "c.tsv", [f"{s}\t{label_of(s)}" for s in SENTENCES])
    trainer = Trainer(recipe(task="classify", corpus=None, train_tsv=str(tsv), init_from=str(tmp_path / "mlm")),
                      tmp_path / "cls")
    pretrained = load_file(str(tmp_path / "mlm" / "model.safetensors"))
    state = trainer.model.state_dict()
    body = [k for k in pretrained if not k.startswith("head.")]
    assert body and all(torch.equal(state[k], pretrained[k]) for k in body)
    assert state["head.classifier.1.weight"].shape == (3, 32)
    assert (tmp_path / "cls" / "spm.model").read_bytes() == (tmp_path / "mlm" / "spm.model").read_bytes()


def test_a_language_model_continues_from_a_trained_one(tmp_path: Path, recipe: Recipe) -> None:
    """init_from an lm directory: the run starts from its weights (its first validation, step 0, is
    the trained model's last one on the same texts), keeps its tokenizer files and shape, records
    where it started; other models and shape-changing keys are refused before OUT is made."""
    text = write_lines(tmp_path / "t.txt", SENTENCES[:80])
    valid = write_lines(tmp_path / "v.txt", SENTENCES[80:100])
    data: dict[str, Any] = {"task": "lm", "corpus": None, "valid_text": str(valid), "valid_every": 3}
    trained = Trainer(recipe(train_text=str(text), max_steps=3, **data), tmp_path / "lm").train()
    more = write_lines(tmp_path / "more.txt", SENTENCES[100:])
    cont = recipe(train_text=str(more), init_from=str(tmp_path / "lm"), max_steps=2, **data)
    result = Trainer(cont, tmp_path / "cont").train()
    assert result.history[0]["step"] == 0 and result.step == 2
    assert result.history[0]["valid_loss"] == pytest.approx(trained.history[-1]["valid_loss"], rel=1e-6)
    for name in ("spm.model", "tokenizer.json"):
        assert (tmp_path / "cont" / name).read_bytes() == (tmp_path / "lm" / name).read_bytes()
    arch, config, meta = load_config(tmp_path / "cont")
    assert arch == "decoder_only" and config == load_config(tmp_path / "lm")[1] and meta["task"] == "lm"
    assert meta["init_from"]["name"] == str(tmp_path / "lm") and len(meta["init_from"]["sha256"]) == 64
    Trainer(recipe(task="mlm", corpus=None, train_text=str(text), max_steps=1), tmp_path / "mlm").train()
    refusals = {
        "mlm": ({}, "holds a encoder_only model, task 'mlm'; task 'lm' starts from a language model"),
        "lm": ({"model": {"d_model": 64}}, "model.d_model=64: init_from .* keeps its shape"),
    }
    for source, (overrides, message) in refusals.items():
        with pytest.raises(ValueError, match=message):
            Trainer(recipe(train_text=str(more), init_from=str(tmp_path / source), **data, **overrides),
                    tmp_path / "refused")
        assert not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="task 'lm' starts from a qkv model directory"):
        Trainer(recipe(train_text=str(more), init_from="hf:org/name", **data), tmp_path / "refused")


# --- every task resumes exactly ---------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["lm", "mlm", "classify"])
def test_resume_is_exact_for_every_task(tmp_path: Path, recipe: Recipe, task: str) -> None:
    """Stop after 3 updates, resume to 7: the weights of 7 updates in one go, bit for bit (dropout on, an
    epoch boundary crossed, and for mlm the masks of every batch drawn again)."""
    data: dict[str, Any] = {"task": task, "corpus": None, "max_tokens": 300}
    if task == "classify":
        tsv = write_lines(tmp_path / "c.tsv", [f"{s}\t{label_of(s)}" for s in SENTENCES[:40]])
        data.update(train_tsv=str(tsv), valid_tsv=str(tsv))
    else:
        data.update(train_text=str(write_lines(tmp_path / "t.txt", SENTENCES[:40])),
                    valid_text=str(write_lines(tmp_path / "v.txt", SENTENCES[40:50])))
    Trainer(recipe(max_steps=7, **data), tmp_path / "full").train()
    Trainer(recipe(max_steps=3, **data), tmp_path / "split").train()
    assert Trainer(recipe(max_steps=7, **data), tmp_path / "split", resume=True).train().step == 7
    full, split = weights(tmp_path / "full", 7), weights(tmp_path / "split", 7)
    assert full.keys() == split.keys()
    for name in full:
        assert torch.equal(full[name], split[name]), name
    state = json.loads((tmp_path / "split" / "checkpoints" / "step_00000007" / "trainer_state.json").read_text())
    assert state["sampler"]["epoch"] >= 1


# --- the command line -----------------------------------------------------------------------------------------
TINY_ARGS = ["--preset", "tiny", "--model.d_model", "32", "--model.d_ff", "64", "--model.n_heads", "2",
             "--vocab_size", "40", "--max_tokens", "400", "--warmup", "10", "--lr", "3e-3", "--schedule",
             "inverse_sqrt", "--valid_every", "2", "--log_every", "1", "--tensorboard", "false", "--threads", "1",
             "--max_steps", "4"]


def qkv(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """Run the CLI; returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_lm_mlm_and_classify_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    train = write_lines(tmp_path / "train.txt", SENTENCES[:100])
    valid = write_lines(tmp_path / "valid.txt", SENTENCES[100:])
    code, _, err = qkv(capsys, "train", "--task", "lm", "--train_text", train, "--valid_text", valid,
                       "--out", tmp_path / "lm", *TINY_ARGS)
    assert code == 0, err
    assert load_config(tmp_path / "lm")[0] == "decoder_only"
    with open(tmp_path / "lm" / "log.csv", newline="") as f:
        assert [float(r["valid_ppl"]) > 1 for r in csv.DictReader(f) if r["valid_loss"]] == [True, True]
    code, out, err = qkv(capsys, "generate", "--model", tmp_path / "lm", "--prompt", "a dog", "--prompt", "the cat",
                         "--max-new-tokens", "5")
    assert code == 0 and len(out.splitlines()) == 2, err
    monkeypatch.setattr("sys.stdin", io.StringIO("a dog\n\ntwo girls\n"))
    sampled = ["generate", "--model", tmp_path / "lm", "--sample", "--top-p", "0.9", "--temperature", "0.8",
               "--seed", "7", "--input", write_lines(tmp_path / "prompts.txt", ["a dog", "", "two girls"])]
    code, out, err = qkv(capsys, *sampled)
    assert code == 0 and len(out.splitlines()) == 3, err
    assert qkv(capsys, *sampled)[1] == out  # a seed fixes the samples
    code, stdin_out, err = qkv(capsys, *sampled[:-2])
    assert code == 0 and stdin_out == out, err

    code, _, err = qkv(capsys, "train", "--task", "mlm", "--train_text", train, "--out", tmp_path / "mlm", *TINY_ARGS)
    assert code == 0, err
    tsv = write_lines(tmp_path / "c.tsv", [f"{s}\t{label_of(s)}" for s in SENTENCES])
    code, out, err = qkv(capsys, "train", "--task", "classify", "--train_tsv", tsv, "--valid_tsv", tsv,
                         "--init_from", tmp_path / "mlm", "--out", tmp_path / "cls", *TINY_ARGS)
    assert code == 0 and "best accuracy" in out, err
    with open(tmp_path / "cls" / "log.csv", newline="") as f:
        assert all(r["valid_macro_f1"] for r in csv.DictReader(f) if r["valid_loss"])
    code, out, err = qkv(capsys, "classify", "--model", tmp_path / "cls", "--input", valid)
    assert code == 0, err
    assert len(out.splitlines()) == 20 and set(out.split()) <= {"cat", "dog", "person"}
    code, _, err = qkv(capsys, "classify", "--model", tmp_path / "lm", "--input", valid)
    assert code == 2 and "holds no classifier" in err
    code, _, err = qkv(capsys, "generate", "--model", tmp_path / "cls", "--prompt", "a")
    assert code == 2 and "decoder-only" in err


@pytest.mark.parametrize("args,expected", [
    (["--task", "summarize"], "task='summarize'; choose from"),
    (["--task", "lm", "--train_text", "EMPTY"], "no text in"),
    (["--task", "classify", "--train_tsv", "NOLABEL"], "nolabel.tsv:2: expected text<TAB>label, found no tab"),
    (["--task", "classify", "--train_tsv", "ONELABEL"], "a classifier needs two or more"),
    (["--task", "classify", "--train_tsv", "NOTEXT"], "notext.tsv:1: the text is empty"),
    (["--task", "classify", "--train_tsv", "TSV", "--valid_tsv", "UNSEEN"], "labels that"),
    (["--task", "lm", "--train_src", "TSV", "--train_text", "TSV"], "reads corpus, train_text, valid_text, init_from, not "
                                                                      "train_src"),
    (["--task", "lm", "--train_text", "TSV", "--valid_metric", "bleu"], "task 'lm' chooses from ['loss']"),
    (["--task", "lm", "--train_text", "TSV", "--model.arch", "rnn"], "is an encoder-decoder"),
    (["--corpus", "synthetic", "--model.arch", "lstm"], "arch='lstm'; choose from"),
])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                               expected: str) -> None:
    files = {
        "EMPTY": write_lines(tmp_path / "empty.txt", ["", "  "]),
        "NOLABEL": write_lines(tmp_path / "nolabel.tsv", ["a dog\tdog", "a cat"]),
        "ONELABEL": write_lines(tmp_path / "one.tsv", ["a dog\tdog", "the dog\tdog"]),
        "NOTEXT": write_lines(tmp_path / "notext.tsv", [" \tdog", "a cat\tcat"]),
        "TSV": write_lines(tmp_path / "c.tsv", ["a dog\tdog", "a cat\tcat"]),
        "UNSEEN": write_lines(tmp_path / "u.tsv", ["a cow\tcow"]),
    }
    argv = [str(files.get(a, a)) for a in args]
    code, _, err = qkv(capsys, "train", *argv, "--out", tmp_path / "run", *TINY_ARGS)
    lines = [line for line in err.splitlines() if line.startswith("qkv train: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert expected in lines[0].replace(str(tmp_path) + "/", "")
    assert not (tmp_path / "run").exists()  # a run that fails before its first checkpoint leaves nothing


# --- the RNN baseline -----------------------------------------------------------------------------------------
def test_the_rnn_is_trained_by_the_same_trainer_and_resumes_exactly(tmp_path: Path, recipe: Recipe) -> None:
    """model.arch rnn: the translation task, its validation BLEU decoded by the same greedy search, exact resume,
    and a model directory that loads back as the GRU encoder-decoder."""
    cfg = {"synthetic_train": 120, "valid_bleu": True, "valid_metric": "bleu", "model": {"arch": "rnn"}}
    result = Trainer(recipe(max_steps=6, **cfg), tmp_path / "full").train()
    assert result.history and "valid_bleu" in result.history[-1]
    Trainer(recipe(max_steps=3, **cfg), tmp_path / "split").train()
    Trainer(recipe(max_steps=6, **cfg), tmp_path / "split", resume=True).train()
    full, split = weights(tmp_path / "full", 6), weights(tmp_path / "split", 6)
    assert all(torch.equal(full[name], split[name]) for name in full)
    model = load_model_dir(tmp_path / "full")
    assert isinstance(model, RNNSearch) and load_config(tmp_path / "full")[0] == "rnn"
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    assert [len(r) for r in beam_search(model, src, beam=3, nbest=2, max_len=5)] == [2, 2]


def test_a_language_model_reads_one_side_of_a_named_corpus(tmp_path: Path, recipe: Recipe) -> None:
    """--corpus multi30k --src_lang en: the English lines of the train and val splits, nothing of the others."""
    folder = tmp_path / "data" / "multi30k"
    folder.mkdir(parents=True)
    for split, lines in (("train", SENTENCES[:80]), ("val", SENTENCES[80:90])):
        for lang, text in (("en", lines), ("de", [f"ein satz {i}" for i in range(len(lines))])):
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(f"{line}\n" for line in text))
    cfg = recipe(task="lm", corpus="multi30k", src_lang="en", data_dir=str(tmp_path / "data"))
    data = Trainer(cfg, tmp_path / "run").data
    assert data.tokenizer.decode_src(data.train) == SENTENCES[:80]
    assert data.tokenizer.decode_src(data.valid) == SENTENCES[80:90]
