"""Bad input and faults in training. Never lose a user's files, never report a broken run
as a success, one clear line for every mistake (`qkv train: error: ...`, exit 2)."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from qkv.apps.cli import main
from qkv.modeldir import CheckpointError, load_config, load_model_dir, load_weights, save_model_dir
from qkv.train import Trainer, load_train_config
from qkv.train.checkpoints import list_checkpoints
from qkv.train.trainer import TrainingError

TINY: dict[str, Any] = {
    "corpus": "synthetic", "synthetic_train": 400, "synthetic_valid": 20, "synthetic_max_value": 9999,
    "preset": "tiny", "model": {"d_model": 32, "d_ff": 64, "n_heads": 2},
    "vocab_size": 60, "max_tokens": 400, "warmup": 10, "lr": 3e-3, "schedule": "inverse_sqrt",
    "valid_every": 3, "log_every": 1, "valid_bleu": False, "valid_metric": "loss", "tensorboard": False,
    "threads": 1, "max_steps": 6,
}


def tiny_recipe(**overrides: Any) -> Any:
    model = {**TINY["model"], **overrides.pop("model", {})}
    return load_train_config(None, {**TINY, **overrides, "model": model})


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY), encoding="utf-8")
    return path


def qkv(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    """Run the CLI; returns (exit code, stderr)."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def one_error_line(err: str, command: str = "train") -> str:
    lines = [line for line in err.splitlines() if line.startswith(f"qkv {command}: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- 1: divergence ------------------------------------------------------------------------------
def test_a_diverging_run_stops_with_the_step_and_the_likely_cause(tmp_path: Path, config: Path, capsys) -> None:
    out = tmp_path / "run"
    # no log row or validation before the loss turns NaN (either would stop the run first)
    code, err = qkv(capsys, "train", config, "--out", out, "--lr", "1e6", "--max_steps", "30",
                    "--log_every", "1000", "--valid_every", "1000")
    assert code == 2
    line = one_error_line(err)
    assert "diverged at step" in line and "learning rate is likely too high" in line
    assert "not finite in 5 updates in a row" in line
    config_json = out / "config.json"
    if config_json.exists():  # a model directory written before the divergence holds no NaN
        assert math.isfinite(json.loads(config_json.read_text())["best_metric"])


@pytest.mark.parametrize("which", ["validation", "training"])
def test_a_loss_that_explodes_but_stays_finite_stops_the_run(tmp_path: Path, capsys, which: str) -> None:
    """--lr 1e6 on the synthetic corpus: losses of ~1e7 to 1e8, never NaN. The run stops at the
    first validation (or log row) with the divergence message, exit 2, no best model saved."""
    every = ["--valid_every", "5", "--log_every", "100"]
    if which == "training":
        every = ["--valid_every", "100", "--log_every", "5"]
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", "--corpus", "synthetic", "--preset", "tiny", "--lr", "1e6",
                    "--max_steps", "10", "--threads", "1", "--out", out, *every)
    line = one_error_line(err)
    assert code == 2 and f"diverged at step 5: the {which} loss is" in line
    assert "times an untrained model's" in line and "learning rate is likely too high" in line
    assert not (out / "model.safetensors").exists()


def test_a_loss_of_an_untrained_model_is_no_divergence(tmp_path: Path) -> None:
    trainer = Trainer(tiny_recipe(), tmp_path)
    untrained = math.log(trainer.task.classes)
    trainer._check_loss("validation", 3 * untrained)  # a poor model, not a diverged one
    with pytest.raises(TrainingError, match="31 times an untrained"):
        trainer._check_loss("validation", 31 * untrained)
    with pytest.raises(TrainingError, match="the training loss is inf"):
        trainer._check_loss("training", math.inf)


def test_a_nan_metric_is_never_the_best(tmp_path: Path) -> None:
    trainer = Trainer(tiny_recipe(), tmp_path)
    assert not trainer._improved({"valid_loss": math.nan})
    assert trainer.progress.best_metric is None
    assert trainer._improved({"valid_loss": 2.0})
    assert not trainer._improved({"valid_loss": math.nan})


def test_a_skipped_update_does_not_advance_the_step(tmp_path: Path) -> None:
    trainer = Trainer(tiny_recipe(), tmp_path)
    batch = next(trainer._batches())
    with torch.no_grad():
        trainer.model.encoder.layers[0].self_attn.in_proj.weight[0, 0] = math.nan
    trainer.train_step([batch])
    assert trainer.step == 0 and trainer.progress.skipped_updates == 1
    assert not trainer.optimizer.state  # Adam never stepped


# --- 2: the output directory --------------------------------------------------------------------
def test_train_refuses_a_non_empty_directory_that_is_not_a_run(tmp_path: Path, config: Path, capsys) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"precious")  # e.g. a model made by qkv average
    code, err = qkv(capsys, "train", config, "--out", out)
    assert code == 2 and "--overwrite" in one_error_line(err)
    assert (out / "model.safetensors").read_bytes() == b"precious"
    code, err = qkv(capsys, "train", config, "--out", out, "--overwrite", "--max_steps", "3")
    assert code == 0, err


def test_writes_do_not_follow_symlinks_out_of_the_output_directory(tmp_path: Path, config: Path, capsys) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.csv").symlink_to(outside)
    code, err = qkv(capsys, "train", config, "--out", out, "--overwrite")
    assert code == 2 and "symbolic link" in one_error_line(err)
    assert outside.read_text() == "keep me"


# --- 3: atomic files, checkpoints hold the tokenizer -----------------------------------------------
def test_resume_survives_a_truncated_top_level_tokenizer(tmp_path: Path, config: Path, capsys) -> None:
    out = tmp_path / "run"
    assert qkv(capsys, "train", config, "--out", out, "--max_steps", "3")[0] == 0
    checkpoint = list_checkpoints(out)[-1]
    assert {"tokenizer.json", "spm.model"} <= {p.name for p in checkpoint.iterdir()}
    (out / "spm.model").write_bytes((out / "spm.model").read_bytes()[:10])  # a kill mid-write
    code, err = qkv(capsys, "train", config, "--out", out, "--resume")
    assert code == 0, err
    assert (out / "spm.model").read_bytes() == (checkpoint / "spm.model").read_bytes()
    leftovers = [p for p in out.rglob("*.tmp")]
    assert not leftovers


# --- 11: one typed parser -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (["--max_steps", "2.5"], "max_steps must be int, got 2.5"),
        (["--max_steps", "abc"], "max_steps must be int, got 'abc'"),
        (["--threads", "abc"], "threads must be int | None, got 'abc'"),
        (["--adam_betas", "0.9"], "adam_betas must be tuple[float, float], got 0.9"),
        (["--model.n_heads", "four"], "n_heads must be int, got 'four'"),
        (["--tensorboard", "maybe"], "tensorboard must be bool, got 'maybe'"),
        (["--model", "5"], "model must be"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_key_value_and_type(
    tmp_path: Path, config: Path, capsys, override: list[str], expected: str
) -> None:
    code, err = qkv(capsys, "train", config, "--out", tmp_path / "run", *override)
    assert code == 2 and expected in one_error_line(err)
    assert not (tmp_path / "run").exists()


def test_yaml_numbers_read_as_strings_are_floats(tmp_path: Path) -> None:
    cfg = tiny_recipe(lr="2e-3", adam_eps="1e-9", adam_betas=[0.9, 0.98])
    assert (cfg.lr, cfg.adam_eps, cfg.adam_betas) == (2e-3, 1e-9, (0.9, 0.98))


@pytest.mark.parametrize(("model", "expected"), [({"d_model": "64"}, "d_model must be int, got '64'"), (None, "got None")])
def test_config_json_values_of_the_wrong_type_name_the_file_and_key(tmp_path: Path, model: Any, expected: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "transformer", "model": model}))
    with pytest.raises(CheckpointError, match=r"config\.json") as error:
        load_config(tmp_path)
    assert expected in str(error.value)


# --- 4: resume with a changed config ------------------------------------------------------------
def test_resume_refuses_a_changed_recipe_and_applies_safe_changes(tmp_path: Path, config: Path, capsys) -> None:
    out = tmp_path / "run"
    assert qkv(capsys, "train", config, "--out", out, "--max_steps", "3")[0] == 0
    code, err = qkv(capsys, "train", config, "--out", out, "--resume", "--lr", "1e-3", "--model.d_ff", "96")
    line = one_error_line(err)
    assert code == 2 and "lr (run: 0.003, now: 0.001)" in line and "model.d_ff (run: 64, now: 96)" in line
    code, err = qkv(capsys, "train", config, "--out", out, "--resume", "--max_steps", "6", "--log_every", "2")
    assert code == 0, err
    recorded = yaml.safe_load((out / "train_config.yaml").read_text())
    assert recorded["max_steps"] == 6 and recorded["log_every"] == 2 and recorded["lr"] == 3e-3
    assert list_checkpoints(out)[-1].name == "step_00000006"


def test_resume_refuses_data_that_changed_under_the_same_path(tmp_path: Path, capsys) -> None:
    """300 pairs, then 200 under the same file names: --resume names the files that changed, and
    goes on with them only when told (--allow-data-change)."""
    def write(n: int) -> None:
        (tmp_path / "train.src").write_text("".join(f"{i} {i + 1}\n" for i in range(n)))
        (tmp_path / "train.tgt").write_text("".join(f"n{i} n{i + 1}\n" for i in range(n)))

    recipe = {k: v for k, v in TINY.items() if not k.startswith(("corpus", "synthetic"))}
    recipe.update(train_src=str(tmp_path / "train.src"), train_tgt=str(tmp_path / "train.tgt"),
                  valid_every=100, max_steps=3)
    config = tmp_path / "files.yaml"
    config.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    out = tmp_path / "run"
    write(300)
    assert qkv(capsys, "train", config, "--out", out)[0] == 0
    write(200)
    code, err = qkv(capsys, "train", config, "--out", out, "--resume", "--max_steps", "5")
    line = one_error_line(err)
    assert code == 2 and "the data differs from the run's" in line
    assert f"train_src ({tmp_path / 'train.src'})" in line and "train_tgt" in line
    assert "--allow-data-change" in line
    code, err = qkv(capsys, "train", config, "--out", out, "--resume", "--max_steps", "5",
                    "--allow-data-change")
    assert code == 0, err
    assert list_checkpoints(out)[-1].name == "step_00000005"


def test_resume_with_a_key_missing_from_the_trainer_state_is_one_line(
    tmp_path: Path, config: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert qkv(capsys, "train", config, "--out", out, "--max_steps", "3")[0] == 0
    state_file = list_checkpoints(out)[-1] / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["sampler"]
    state_file.write_text(json.dumps(state))
    code, err = qkv(capsys, "train", config, "--out", out, "--resume")
    line = one_error_line(err)
    assert code == 2 and "lacks 'sampler'" in line and str(state_file) in line


# --- 5: average ---------------------------------------------------------------------------------
@pytest.fixture
def run(tmp_path: Path, config: Path, capsys) -> Path:
    out = tmp_path / "run"
    assert qkv(capsys, "train", config, "--out", out, "--max_steps", "9", "--valid_every", "3")[0] == 0
    return out


def test_average_validates_first_and_names_the_offending_checkpoint(run: Path, tmp_path: Path, capsys) -> None:
    for last in ("0", "-2"):
        code, err = qkv(capsys, "average", "--model", run, "--last", last, "--out", tmp_path / "avg")
        assert code == 2 and "--last must be at least 1" in one_error_line(err, "average")
    bad = list_checkpoints(run)[0] / "model.safetensors"
    other = tiny_recipe(model={"d_model": 16, "d_ff": 32})
    from qkv.model import Transformer
    save_model_dir(tmp_path / "other", Transformer(other.model_config(60, 60)))
    bad.write_bytes((tmp_path / "other" / "model.safetensors").read_bytes())
    code, err = qkv(capsys, "average", "--model", run, "--last", "3", "--out", tmp_path / "avg")
    assert code == 2 and str(bad) in one_error_line(err, "average")
    assert not (tmp_path / "avg").exists()  # nothing written before the checks


def test_average_into_the_run_directory_itself(run: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(run.parent)
    code, err = qkv(capsys, "average", "--model", "run", "--last", "2", "--out", run.resolve())
    assert code == 0, err


def test_average_refuses_a_non_empty_out_unless_told(run: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"another model")
    (other / "config.json").write_text("{}")
    code, err = qkv(capsys, "average", "--model", run, "--last", "2", "--out", other)
    assert code == 2 and "--overwrite" in one_error_line(err, "average")
    assert (other / "model.safetensors").read_bytes() == b"another model"
    assert (other / "config.json").read_text() == "{}"
    code, err = qkv(capsys, "average", "--model", run, "--last", "2", "--out", other,
                    "--overwrite")
    assert code == 0, err
    assert load_model_dir(other) is not None


def test_average_loads_strictly(run: Path, tmp_path: Path, capsys) -> None:
    from safetensors.torch import load_file, save_file
    newest = list_checkpoints(run)[-1] / "model.safetensors"
    for p in list_checkpoints(run)[-2:]:
        tensors = load_file(str(p / "model.safetensors"))
        tensors.pop(sorted(tensors)[0])
        save_file(tensors, str(p / "model.safetensors"))
    code, err = qkv(capsys, "average", "--model", run, "--last", "2", "--out", tmp_path / "avg")
    assert code == 2 and "lacks" in one_error_line(err, "average") and str(newest) in err


# --- 8: loading checks finiteness ---------------------------------------------------------------
def test_nan_weights_are_refused_naming_the_file(tmp_path: Path) -> None:
    from qkv.model import Transformer
    model = Transformer(tiny_recipe().model_config(60, 60))
    with torch.no_grad():
        next(model.parameters())[0] = math.nan
    save_model_dir(tmp_path, model)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor .* NaN"):
        load_weights(tmp_path / "model.safetensors", Transformer(tiny_recipe().model_config(60, 60)))


# --- 15: Ctrl-C, corrupt newest checkpoint ------------------------------------------------------
def test_ctrl_c_prints_the_checkpoint_and_the_resume_command(tmp_path: Path, config: Path, capsys, monkeypatch) -> None:
    original = Trainer.train_step

    def interrupted(self: Trainer, batches: Any) -> Any:
        if self.step == 4:
            raise KeyboardInterrupt
        return original(self, batches)

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", config, "--out", out, "--max_steps", "8")
    assert code == 130 and "Traceback" not in err
    assert "step_00000003" in err
    assert f"continue with: qkv train {config} --out {out} --resume --max_steps 8" in err


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, config: Path, capsys, caplog) -> None:
    out = tmp_path / "run"
    assert qkv(capsys, "train", config, "--out", out)[0] == 0
    newest = list_checkpoints(out)[-1] / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])
    code, err = qkv(capsys, "train", config, "--out", out, "--resume", "--max_steps", "9")
    assert code == 0, err
    assert "step_00000006" in caplog.text and "resuming from" in caplog.text and "step_00000003" in caplog.text


# --- 16: small ones -----------------------------------------------------------------------------
def test_orphan_temporary_checkpoints_are_removed_on_resume(tmp_path: Path, config: Path, capsys) -> None:
    out = tmp_path / "run"
    assert qkv(capsys, "train", config, "--out", out, "--max_steps", "3")[0] == 0
    orphan = out / "checkpoints" / ".step_00000006.12345.tmp"
    orphan.mkdir()
    (orphan / "model.safetensors").write_bytes(b"half")
    assert qkv(capsys, "train", config, "--out", out, "--resume")[0] == 0
    assert not orphan.exists()


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (["--keep_checkpoints", "0"], "keep_checkpoints must be positive"),
        (["--lr", "-1"], "lr must be positive"),
        (["--max_nonfinite_updates", "0"], "max_nonfinite_updates must be positive"),
    ],
)
def test_the_whole_config_is_checked_before_any_work(tmp_path: Path, config: Path, capsys, override: list[str], expected: str) -> None:
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", config, "--out", out, *override)
    assert code == 2 and expected in one_error_line(err)
    assert not out.exists()  # no tokenizer trained, no directory left


# --- 13 / 14: bad input, faults -----------------------------------------------------------------
def test_an_empty_training_corpus_is_one_line(tmp_path: Path, capsys) -> None:
    tsv = tmp_path / "train.tsv"
    tsv.write_text("")
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", "--out", out, "--train_tsv", tsv, "--preset", "tiny")
    assert code == 2 and f"no training pairs in {tsv}" in one_error_line(err)
    assert not out.exists()  # the failed run removes the directory it created


def test_a_whitespace_only_training_corpus_is_one_line(tmp_path: Path, capsys) -> None:
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    src.write_text("  \n\t\n \n")
    tgt.write_text("a\n \n\t\n")
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", "--out", out, "--train_src", src, "--train_tgt", tgt)
    assert code == 2 and f"no training pairs in {src} + {tgt}" in one_error_line(err)
    assert not out.exists()


def test_out_that_is_a_file_is_one_line(tmp_path: Path, config: Path, capsys) -> None:
    out = tmp_path / "file"
    out.write_text("x")
    code, err = qkv(capsys, "train", config, "--out", out)
    assert code == 2 and "is a file" in one_error_line(err)
    assert out.read_text() == "x"


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: 0.001\nmax_steps: [3\nwarmup: 10\n")
    code, err = qkv(capsys, "train", bad, "--out", tmp_path / "run")
    line = one_error_line(err)
    assert code == 2 and str(bad) in line and "line " in line


def test_disk_full_at_the_first_checkpoint_does_not_suggest_resume(
    tmp_path: Path, config: Path, capsys, monkeypatch
) -> None:
    """No checkpoint to resume from (and the directory this run created removed): the line says
    to run the command again, not --resume."""
    import qkv.train.checkpoints as checkpoints

    def full_disk(path: Any, model: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_weights", full_disk)
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", config, "--out", out)
    line = one_error_line(err)
    assert code == 2 and "No space left on device" in line and "no checkpoint was written" in line
    assert "--resume" not in line and "run the same command again" in line
    assert not out.exists()


def test_disk_full_while_checkpointing_stops_and_names_the_last_good_checkpoint(
    tmp_path: Path, config: Path, capsys, monkeypatch
) -> None:
    import qkv.train.checkpoints as checkpoints

    original = checkpoints.save_weights

    def full_disk(path: Any, model: Any) -> None:
        if "step_00000006" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        original(path, model)

    monkeypatch.setattr(checkpoints, "save_weights", full_disk)
    out = tmp_path / "run"
    code, err = qkv(capsys, "train", config, "--out", out)
    line = one_error_line(err)
    assert code == 2 and "No space left on device" in line and "step_00000003" in line
    assert [p.name for p in list_checkpoints(out)] == ["step_00000003"]
    assert not list((out / "checkpoints").glob(".*.tmp"))
