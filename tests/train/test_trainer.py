"""The training loop: exact resume, gradient accumulation, checkpoints, averaging, config errors."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import BLEU
from safetensors.torch import load_file

from qkv.apps.cli import main
from qkv.apps.translator import Translator
from qkv.data.batching import collate
from qkv.decode.options import DecodeOptions
from qkv.modeldir import CheckpointError, load_model_dir
from qkv.runtime.runtime_options import RuntimeOptions
from qkv.train import TrainConfig, Trainer
from qkv.train.average import average_into, average_run, best_window
from qkv.train.checkpoints import checkpoint_dir, list_checkpoints
from qkv.train.recipe import load_train_config, parse_overrides

Recipe = Callable[..., TrainConfig]



def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


@pytest.mark.parametrize("sampled", [False, True], ids=["fixed-subwords", "subword-dropout"])
def test_resume_continues_exactly(tmp_path: Path, recipe: Recipe, sampled: bool) -> None:
    """Stop after 3 updates, resume to 7: the same parameters (bit for bit) as 7 updates in one go.
    Dropout is on, so the RNG state must be restored too, and 7 crosses an epoch boundary; with subword
    dropout the resumed epoch must draw the same segmentation."""
    small = {"synthetic_train": 120, **({"subword": "bpe", "subword_dropout": 0.1} if sampled else {})}
    Trainer(recipe(max_steps=7, **small), tmp_path / "full").train()
    Trainer(recipe(max_steps=3, **small), tmp_path / "split").train()
    result = Trainer(recipe(max_steps=7, **small), tmp_path / "split", resume=True).train()
    assert result.step == 7
    full, split = weights(tmp_path / "full", 7), weights(tmp_path / "split", 7)
    assert full.keys() == split.keys()
    for name in full:
        assert torch.equal(full[name], split[name]), name
    state = json.loads((tmp_path / "split" / "checkpoints" / "step_00000007" / "trainer_state.json").read_text())
    assert state["sampler"]["epoch"] >= 1  # the run did cross into a second epoch


def test_a_resumed_log_keeps_its_rows_on_disk_before_the_first_new_one(tmp_path: Path, recipe: Recipe) -> None:
    """Resuming rewrites log.csv without the rows past the checkpoint; the kept rows must be on disk at once
    (a run killed before its next log row must not leave an empty log.csv, its rows in a write buffer)."""
    Trainer(recipe(max_steps=4, valid_every=2), tmp_path).train()
    before = (tmp_path / "log.csv").read_text()
    training_log = Trainer(recipe(max_steps=8, valid_every=2), tmp_path, resume=True)._open_log()
    try:
        assert (tmp_path / "log.csv").read_text() == before
    finally:
        training_log.close()


def test_building_a_trainer_leaves_the_process_settings_alone(tmp_path: Path, recipe: Recipe) -> None:
    """Threads and the global RNG are the caller's (configure_process): constructing a Trainer, fresh
    or resumed, changes neither, though the recipe names a thread count and a seed."""
    Trainer(recipe(max_steps=3, seed=5), tmp_path / "run").train()
    torch.set_num_threads(2)
    torch.manual_seed(99)
    state = torch.get_rng_state()
    for resume in (False, True):
        cfg = recipe(max_steps=6, threads=1, seed=5)
        Trainer(cfg, tmp_path / ("run" if resume else "fresh"), resume=resume)
        assert torch.get_num_threads() == 2
        assert torch.equal(torch.get_rng_state(), state)


def test_the_model_and_dropout_come_from_the_recipe_seed_alone(tmp_path: Path, recipe: Recipe) -> None:
    """Whatever the process's random state, a run with the same recipe trains the same weights."""
    for name, seed in (("a", 1), ("b", 2)):
        torch.manual_seed(seed)
        Trainer(recipe(max_steps=3), tmp_path / name).train()
    a, b = weights(tmp_path / "a", 3), weights(tmp_path / "b", 3)
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_a_run_is_not_overwritten_without_resume(tmp_path: Path, recipe: Recipe) -> None:
    Trainer(recipe(max_steps=3), tmp_path).train()
    with pytest.raises(ValueError, match="--resume"):
        Trainer(recipe(max_steps=3), tmp_path)


def test_gradient_accumulation_equals_one_big_batch(tmp_path: Path, recipe: Recipe) -> None:
    trainer = Trainer(recipe(model={"dropout": 0.0, "attention_dropout": 0.0}), tmp_path)
    d = trainer.data
    tok = d.tokenizer
    idx = list(range(8))
    pairs = [(d.train_src[i], d.train_tgt[i]) for i in idx]
    whole = collate(pairs, tok.pad_id, tok.bos_id, tok.eos_id)
    parts = [collate(pairs[:3], tok.pad_id, tok.bos_id, tok.eos_id), collate(pairs[3:], tok.pad_id, tok.bos_id,
                                                                            tok.eos_id)]
    grads = []
    for batches in ([whole], parts):
        for p in trainer.model.parameters():
            p.grad = None
        trainer.accumulate_gradients(batches)
        grads.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-4)


def test_checkpoints_model_dir_and_averaging(tmp_path: Path, recipe: Recipe) -> None:
    run = tmp_path / "run"
    Trainer(recipe(max_steps=9, keep_checkpoints=2), run).train()
    assert [p.name for p in list_checkpoints(run)] == ["step_00000006", "step_00000009"]
    model = load_model_dir(run)  # OUT is a model directory: config, weights, tokenizer
    assert (run / "spm.model").is_file() and (run / "log.csv").is_file()
    target, _paths = average_run(run, last=2, out_dir=tmp_path / "avg")
    averaged = load_model_dir(target).state_dict()
    a, b = weights(run, 6), weights(run, 9)
    name = "encoder.layers.0.feed_forward.w_1.weight"
    torch.testing.assert_close(averaged[name], (a[name] + b[name]) / 2)
    assert model.config == load_model_dir(target).config
    with pytest.raises(ValueError, match="fewer than the 5"):
        average_run(run, last=5)


def fake_run(root: Path, metric: str, history: dict[int, float], steps: list[int]) -> Path:
    """Step checkpoints holding only a trainer state whose history scores `history`."""
    key = f"valid_{metric}"
    for step in steps:
        folder = checkpoint_dir(root, step)
        folder.mkdir(parents=True)
        state = {"step": step, "config": {"valid_metric": metric},
                 "history": [{"step": s, "valid_loss": 1.0, key: v} for s, v in history.items()]}
        (folder / "trainer_state.json").write_text(json.dumps(state))
    return root


def test_best_window_has_the_best_mean_score(tmp_path: Path) -> None:
    scores = {10: 1.0, 20: 5.0, 30: 4.0, 40: 9.0, 50: 2.0, 60: 3.0}
    bleu = fake_run(tmp_path / "bleu", "bleu", scores, list(scores))
    window = best_window(bleu, 2)  # pair means 3, 4.5, 6.5, 5.5, 2.5
    assert [p.name for p in window.paths] == ["step_00000030", "step_00000040"]
    assert window.metric == "bleu" and window.mean == 6.5
    assert [p.name for p in best_window(bleu, 1).paths] == ["step_00000040"]
    # a loss is best low; on a tie the later window wins
    loss = fake_run(tmp_path / "loss", "loss", {}, list(scores))
    for path in list_checkpoints(loss):
        state = json.loads((path / "trainer_state.json").read_text())
        state["history"] = [{"step": s, "valid_loss": {10: 3.0, 20: 1.0, 30: 2.0}.get(s, 1.5)}
                            for s in scores]
        (path / "trainer_state.json").write_text(json.dumps(state))
    assert [p.name for p in best_window(loss, 2).paths] == ["step_00000050", "step_00000060"]
    assert best_window(loss, 2).mean == -1.5
    # a window's checkpoints are of consecutive validations: 20 and 40, with 30 pruned, are not one
    gap = fake_run(tmp_path / "gap", "bleu", {10: 1.0, 20: 8.0, 30: 0.0, 40: 9.0, 50: 2.0}, [10, 20, 40, 50])
    assert [p.name for p in best_window(gap, 2).paths] == ["step_00000040", "step_00000050"]
    with pytest.raises(ValueError, match="keeps no 3 checkpoints"):
        best_window(gap, 3)
    with pytest.raises(ValueError, match="records no validations"):
        best_window(fake_run(tmp_path / "none", "bleu", {}, [10]), 1)
    with pytest.raises(ValueError, match="at least 1"):
        best_window(bleu, 0)


def test_average_best_window_of_a_run(tmp_path: Path, recipe: Recipe) -> None:
    """`qkv average --best 3` averages the 3 consecutive checkpoints whose validation losses, as
    log.csv records them, have the lowest mean; --best and --last exclude each other."""
    run = tmp_path / "run"
    Trainer(recipe(max_steps=8, valid_every=1, keep_checkpoints=8), run).train()
    with open(run / "log.csv", newline="") as f:
        losses = {int(r["step"]): float(r["valid_loss"]) for r in csv.DictReader(f) if r["valid_loss"]}
    assert sorted(losses) == list(range(1, 9))
    start = min(range(1, 7), key=lambda s: (sum(losses[s + i] for i in range(3)), -s))
    assert main(["average", "--model", str(run), "--best", "3", "--out", str(tmp_path / "avg")]) == 0
    paths = best_window(run, 3).paths
    assert [p.name for p in paths] == [f"step_{s:08d}" for s in range(start, start + 3)]
    averaged = load_model_dir(tmp_path / "avg").state_dict()
    name = "encoder.layers.0.feed_forward.w_1.weight"
    mean = sum(weights(run, s)[name] for s in range(start, start + 3)) / 3
    torch.testing.assert_close(averaged[name], mean)
    with pytest.raises(SystemExit):  # argparse: not allowed with argument --last
        main(["average", "--model", str(run), "--last", "2", "--best", "2"])


def test_keep_best_checkpoints_keeps_the_best_window(tmp_path: Path, recipe: Recipe, monkeypatch) -> None:
    """With keep_best_checkpoints 3 a run keeps its last 3 checkpoints and those of the 3 validations
    in a row with the best mean score (scripted losses here), which `best_window` picks;
    every other checkpoint is pruned."""
    losses = dict(enumerate([5.0, 4.0, 3.0, 1.0, 1.2, 1.1, 3.0, 4.0, 5.0, 6.0], start=1))
    monkeypatch.setattr(Trainer, "validate", lambda self: {"valid_loss": losses[self.step]})
    run = tmp_path / "run"
    Trainer(recipe(max_steps=10, valid_every=1, keep_checkpoints=3, keep_best_checkpoints=3), run).train()
    assert [p.name for p in list_checkpoints(run)] == [f"step_{s:08d}" for s in (4, 5, 6, 8, 9, 10)]
    paths = best_window(run, 3).paths
    assert [p.name for p in paths] == [f"step_{s:08d}" for s in (4, 5, 6)]
    average_into(run, paths, tmp_path / "avg")  # the kept window averages
    with pytest.raises(ValueError, match="keep_best_checkpoints must be 0"):
        recipe(keep_checkpoints=3, keep_best_checkpoints=4)


def test_truncated_checkpoint_is_a_clear_error(tmp_path: Path, recipe: Recipe) -> None:
    Trainer(recipe(max_steps=3), tmp_path).train()
    opt = tmp_path / "checkpoints" / "step_00000003" / "optimizer.safetensors"
    opt.write_bytes(opt.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"optimizer\.safetensors"):
        Trainer(recipe(max_steps=6), tmp_path, resume=True)


def test_config_errors_name_the_key(tmp_path: Path, recipe: Recipe) -> None:
    with pytest.raises(ValueError, match="max_stepz"):
        recipe(max_stepz=3)
    with pytest.raises(ValueError, match="d_modle"):
        recipe(model={"d_modle": 3})
    (tmp_path / "bad.yaml").write_text("corpus: synthetic\nlearning_rate: 0.1\n")
    with pytest.raises(ValueError, match="learning_rate"):
        load_train_config(tmp_path / "bad.yaml")
    assert parse_overrides(["--lr", "0.5", "--model.d_model", "64", "--joint-vocab", "false", "--download"]) == {
        "lr": 0.5, "model": {"d_model": 64}, "joint_vocab": False, "download": True}
    # keys' dashes become underscores, values keep theirs; YAML 1.1 reads 2e-3 as a string, the config a float
    overrides = parse_overrides(["--lr=2e-3", "--data-dir", "my-data", "--corpus", "synthetic"])
    assert overrides == {"lr": "2e-3", "data_dir": "my-data", "corpus": "synthetic"}
    cfg = load_train_config(None, overrides)
    assert cfg.lr == 0.002 and cfg.data_dir == "my-data"


def test_early_stopping_and_bleu_validation(tmp_path: Path, recipe: Recipe) -> None:
    """With a learning rate too small to change anything, validation never improves after the first one:
    patience 2 stops the run at the third validation. BLEU is computed by greedy decoding."""
    result = Trainer(recipe(lr=1e-12, patience=2, valid_every=2, max_steps=50, valid_bleu=True,
                            valid_metric="bleu", valid_max_sentences=5, tensorboard=True), tmp_path).train()
    assert result.stopped_early and result.step == 6
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert [h["step"] for h in result.history] == [2, 4, 6]
    assert all(0.0 <= h["valid_bleu"] <= 100.0 and h["valid_ppl"] > 1.0 for h in result.history)
    assert result.best_step == 2


def test_validation_bleu_is_what_qkv_translate_scores(tmp_path: Path, recipe: Recipe) -> None:
    """Validation decodes through the translator's path (`decode.search.run`, beam 1, the same
    length caps): the model saved at a validation, translated by `Translator` with --beam 1 and
    scored with sacreBLEU, gets the BLEU that validation logged."""
    trainer = Trainer(recipe(max_steps=4, valid_every=4, valid_bleu=True, valid_max_sentences=40),
                      tmp_path)
    result = trainer.train()
    valid = trainer.task.data.valid
    translator = Translator.load(tmp_path, RuntimeOptions(precision="fp32", pack=False))
    texts = translator.translate(valid.src[:40], DecodeOptions(beam=1))
    assert len(set(texts)) > 1  # not one empty or constant output for every sentence
    assert BLEU().corpus_score(texts, [valid.tgt[:40]]).score == result.history[-1]["valid_bleu"]


def test_bad_data_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qkv.apps.cli import main

    (tmp_path / "a.txt").write_text("eins\nzwei\ndrei\n")
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    code = main(["train", "--out", str(tmp_path / "run"), "--train_src", str(tmp_path / "a.txt"),
                 "--train_tgt", str(tmp_path / "b.txt"), "--preset", "tiny"])
    assert code == 2
    assert "a.txt has 3 lines but" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "run"), "--corpus", "synthetic", "--max_stepz", "3"]) == 2
    assert "max_stepz" in capsys.readouterr().err


def test_log_rows_carry_their_step_when_validation_and_logging_differ(recipe: Recipe, tmp_path: Path) -> None:
    """log.csv: a validation at a step that is not a logging step still writes its step and epoch."""
    import csv

    Trainer(recipe(max_steps=6, log_every=4, valid_every=3), tmp_path / "run").train()
    with open(tmp_path / "run" / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["3", "4", "6"]
    assert [bool(r["valid_loss"]) for r in rows] == [True, False, True]
    assert all(r["epoch"] != "" for r in rows)


def test_cpu_bf16_autocast_trains_close_to_float32(recipe: Recipe, tmp_path: Path) -> None:
    """precision bf16: the forward runs in bf16 (so the loss differs a little) while the weights stay float32."""
    fp32 = Trainer(recipe(max_steps=2, precision="fp32"), tmp_path / "fp32")
    bf16 = Trainer(recipe(max_steps=2, precision="bf16"), tmp_path / "bf16")
    batch = next(fp32._batches())
    loss32, _, _ = fp32.accumulate_gradients([batch])
    loss16, _, _ = bf16.accumulate_gradients([batch])
    assert loss16 != loss32 and abs(loss16 - loss32) < 0.02 * loss32
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in bf16.model.parameters()
               if p.grad is not None)


def test_chunked_loss_gives_the_gradients_of_the_unchunked_loss(recipe: Recipe, tmp_path: Path) -> None:
    """loss_chunk_tokens only changes how the output projection is scheduled, not the gradient. (Weights after
    Adam steps are no oracle: Adam turns float noise in near-zero gradients into lr-sized differences.)"""
    whole = Trainer(recipe(), tmp_path / "whole")
    chunked = Trainer(recipe(loss_chunk_tokens=7), tmp_path / "chunked")
    batch = next(whole._batches())
    torch.manual_seed(0)  # the same dropout masks
    loss_whole, nll_whole, _ = whole.accumulate_gradients([batch])
    torch.manual_seed(0)
    loss_chunked, nll_chunked, _ = chunked.accumulate_gradients([batch])
    assert loss_chunked == pytest.approx(loss_whole, rel=1e-5) and nll_chunked == pytest.approx(nll_whole, rel=1e-5)
    for (name, a), b in zip(whole.model.named_parameters(), chunked.model.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_max_hours_stops_at_a_checkpoint_and_the_clock_survives_resume(recipe: Recipe, tmp_path: Path) -> None:
    """A time budget already spent stops the run at its first checkpoint, not at max_steps; resuming
    continues the clock saved in the checkpoint instead of starting it again at zero."""
    import csv

    result = Trainer(recipe(max_steps=50, valid_every=2, max_hours=1e-9), tmp_path / "run").train()
    assert result.step == 2 and list_checkpoints(tmp_path / "run")[-1].name == "step_00000002"
    state_file = tmp_path / "run" / "checkpoints" / "step_00000002" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["elapsed_s"] > 0
    state["elapsed_s"] = 5000.0  # as if the first part had trained for 5,000 s
    state_file.write_text(json.dumps(state))
    Trainer(recipe(max_steps=4, valid_every=2), tmp_path / "run", resume=True).train()
    with open(tmp_path / "run" / "log.csv", newline="") as f:
        elapsed = {r["step"]: float(r["elapsed_s"]) for r in csv.DictReader(f) if r["valid_loss"]}
    assert elapsed["2"] < 5000.0 < elapsed["4"] < 5000.0 + 600
    with pytest.raises(ValueError, match="max_hours"):
        recipe(max_hours=0)


def test_linear_schedule_anneals_to_zero_at_max_steps(recipe: Recipe, tmp_path: Path) -> None:
    """The rate logged after each update (the one the next update uses) is peak x the hand formula."""
    import csv

    cfg = {"schedule": "linear", "warmup": 2, "lr": 1e-3, "max_steps": 6, "valid_every": 3}
    Trainer(recipe(**cfg), tmp_path / "full").train()
    with open(tmp_path / "full" / "log.csv", newline="") as f:
        lrs = {int(r["step"]): float(r["lr"]) for r in csv.DictReader(f) if r["lr"]}
    want = {s: 1e-3 * (min(1.0, (s + 1) / 2) if s < 2 else (6 - s) / 4) for s in range(1, 7)}
    assert lrs == pytest.approx(want, abs=1e-12)
    assert lrs[6] == 0.0
    with pytest.raises(ValueError, match="TrainConfig: schedule 'cosine' decays to 0 at max_steps, which must exceed"):
        recipe(schedule="cosine", warmup=10, max_steps=10)
    with pytest.raises(ValueError, match="TrainConfig: unknown schedule 'rsqrt'"):
        recipe(schedule="rsqrt")


def test_a_resume_that_raises_max_steps_anneals_to_the_new_one(recipe: Recipe, tmp_path: Path) -> None:
    """max_steps may change on resume: the linear schedule then decays to the new max_steps (hand
    formula: peak x (8 - s) / (8 - 2) after warm-up 2), not to the one the checkpoint's plan had."""
    import csv

    cfg = {"schedule": "linear", "warmup": 2, "lr": 1e-3, "valid_every": 2, "log_every": 1}
    Trainer(recipe(**cfg, max_steps=4), tmp_path / "run").train()
    Trainer(recipe(**cfg, max_steps=8), tmp_path / "run", resume=True).train()
    with open(tmp_path / "run" / "log.csv", newline="") as f:
        lrs = {int(r["step"]): float(r["lr"]) for r in csv.DictReader(f) if r["lr"]}
    assert [lrs[s] for s in (1, 2, 3, 4)] == pytest.approx([1e-3, 1e-3, 0.5e-3, 0.0], abs=1e-12)
    assert [lrs[s] for s in (5, 6, 7, 8)] == pytest.approx([1e-3 * (8 - s) / 6 for s in (5, 6, 7, 8)], abs=1e-12)


def test_a_time_budget_anneals_the_linear_schedule_to_where_it_ends_the_run(
    recipe: Recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """max_hours ends the run long before max_steps: the rate logged after each update follows the
    hand formula of the plan each validation makes (from its own logged rate, straight down to the
    predicted end), and at the last update it is a small part of the peak, not the peak."""
    import csv
    import itertools
    import types

    import qkv.train.trainer as trainer_module

    clock = iter(float(i) for i in range(100_000))  # the loop's clock: 1 s a reading
    monkeypatch.setattr(
        trainer_module, "time", types.SimpleNamespace(perf_counter=lambda: next(clock))
    )
    every, budget = 4, 60.0
    cfg = {"schedule": "linear", "warmup": 2, "lr": 1e-3, "max_steps": 1000, "valid_every": every}
    Trainer(recipe(**cfg, log_every=1, max_hours=budget / 3600), tmp_path / "run").train()
    with open(tmp_path / "run" / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lrs = {int(r["step"]): float(r["lr"]) for r in rows if r["lr"]}
    validations = [(int(r["step"]), float(r["elapsed_s"])) for r in rows if r["valid_loss"]]
    last = max(lrs)
    assert last == validations[-1][0] < 1000
    previous_s = 0.0
    for (step, at), (next_step, _) in itertools.pairwise(validations):
        interval, previous_s = at - previous_s, at
        end = step + every * ((budget - at) // interval + 1)  # one interval past the last one
        for s in range(step + 1, next_step + 1):
            assert lrs[s] == pytest.approx(lrs[step] * (end - s) / (end - step), rel=1e-9), s
    assert 0 < lrs[last] < 0.35e-3 and lrs[2] == 1e-3


def test_subword_dropout_draws_a_new_segmentation_every_epoch(tmp_path: Path, recipe: Recipe) -> None:
    trainer = Trainer(recipe(subword="bpe", subword_dropout=0.1), tmp_path)
    d, tok = trainer.data, trainer.data.tokenizer
    texts = [d.text_src[i] for i in d.rows], [d.text_tgt[i] for i in d.rows]
    draws = []
    for epoch in (0, 1, 0):
        trainer.sampler.set_epoch(epoch)
        src, tgt = map(list, trainer._epoch_ids())
        assert tok.decode_src(src) == texts[0] and tok.decode_tgt(tgt) == texts[1]
        assert list(trainer.sampler.tgt_lens) == [len(t) for t in tgt]  # the batches follow the draw
        draws.append((src, tgt))
    assert draws[0] == draws[2] != draws[1]
    assert draws[0][1] != list(d.train_tgt) and draws[0][0] != list(d.train_src)


def test_lowercase_equals_training_on_lowercased_files(tmp_path: Path) -> None:
    """`lowercase: true` on cased files gives the data of a plain run on files lowercased beforehand."""
    from qkv.train.prepared_data import EncodedData, prepare_data

    words = ["A", "Man", "runs", "over", "the", "Green", "grass", "In", "Berlin", "with", "ÄRGER"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(3 + i % 5)) for i in range(60)]
    for name, text in {"s": lines, "t": lines[::-1]}.items():
        (tmp_path / f"{name}.txt").write_text("\n".join(text) + "\n")
        (tmp_path / f"{name}.lc.txt").write_text("\n".join(text).lower() + "\n")

    def data(lowercase: bool, suffix: str, out: str) -> EncodedData:
        files = {f"{k}_{side}": str(tmp_path / f"{n}{suffix}.txt") for k in ("train", "valid")
                 for side, n in (("src", "s"), ("tgt", "t"))}
        cfg = load_train_config(None, {**files, "vocab_size": 40, "preset": "tiny", "lowercase": lowercase})
        return prepare_data(cfg, tmp_path / out, train_tokenizer=True)

    lowered, by_hand = data(True, "", "a"), data(False, ".lc", "b")
    assert lowered.tokenizer.lowercase and not by_hand.tokenizer.lowercase
    assert list(lowered.train_src) == list(by_hand.train_src)
    assert list(lowered.train_tgt) == list(by_hand.train_tgt)
    assert (lowered.valid_src, lowered.valid_tgt) == (by_hand.valid_src, by_hand.valid_tgt)
    assert lowered.valid is not None and by_hand.valid is not None
    assert lowered.valid.tgt == by_hand.valid.tgt == [t.lower() for t in lines[::-1]]  # BLEU references
