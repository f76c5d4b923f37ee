"""precision: bf16 training tracks fp32, keeps fp32 master weights, resumes bit for bit; `auto` resolves
per device and model width and the choice is recorded in the run."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from qkv.runtime import precision
from qkv.runtime.precision import CPU_BF16_MIN_D_MODEL, native_bf16
from qkv.train import TrainConfig, Trainer

Recipe = Callable[..., TrainConfig]


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def train_losses(trainer: Trainer) -> list[float]:
    """The training loss of every update (log_every 1), from the run's log.csv."""
    trainer.train()
    with open(trainer.out / "log.csv", newline="") as f:
        return [float(row["train_loss"]) for row in csv.DictReader(f) if row["train_loss"]]


def test_bf16_training_tracks_fp32_over_the_first_updates(recipe: Recipe, tmp_path: Path) -> None:
    """Six updates from the same start, data and dropout masks: the bf16 run's logged training losses
    within 1.5% of the fp32 run's on average and each within 4% (bf16 keeps 8 mantissa bits: about
    0.4% per product; over seven seeds the gaps measure 0.4-1.0% on average, over thirteen
    0.6-3.1% at most), yet not equal (bf16 did compute); the weights and optimizer state stay
    fp32."""
    fp32 = Trainer(recipe(precision="fp32"), tmp_path / "fp32")
    bf16 = Trainer(recipe(precision="bf16"), tmp_path / "bf16")
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    a, b = train_losses(fp32), train_losses(bf16)
    assert len(a) == len(b) == 6
    assert a != b
    gaps = [abs(x - y) / x for x, y in zip(a, b, strict=True)]
    assert sum(gaps) / len(gaps) <= 0.015 and max(gaps) <= 0.04, (a, b)
    assert a[-1] < a[0] and b[-1] < b[0]  # both learn
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    states = [s for state in bf16.optimizer.state.values() for s in state.values() if s.dim() > 0]
    assert states and all(s.dtype == torch.float32 for s in states)


def test_bf16_resume_continues_exactly(recipe: Recipe, tmp_path: Path) -> None:
    """bf16: stop after 3 updates, resume to 6: the same weights, bit for bit, as 6 updates in one go."""
    Trainer(recipe(max_steps=6, precision="bf16"), tmp_path / "full").train()
    Trainer(recipe(max_steps=3, precision="bf16"), tmp_path / "split").train()
    result = Trainer(recipe(max_steps=6, precision="bf16"), tmp_path / "split", resume=True).train()
    assert result.step == 6
    full, split = weights(tmp_path / "full", 6), weights(tmp_path / "split", 6)
    assert full.keys() == split.keys()
    for name in full:
        assert torch.equal(full[name], split[name]), name


def test_the_run_records_the_precision_and_the_cpu_flags(recipe: Recipe, tmp_path: Path) -> None:
    Trainer(recipe(max_steps=1, precision="bf16"), tmp_path).train()
    first = (tmp_path / "train_config.yaml").read_text().splitlines()[0]
    assert first.startswith("# precision: bf16 (setting bf16; cpu: avx512_bf16")
    assert "native bf16)" in first


@pytest.mark.parametrize("pays", [False, True])
@pytest.mark.parametrize("d_model", [32, CPU_BF16_MIN_D_MODEL])
def test_auto_on_the_cpu_follows_the_hardware_and_the_model_width(
    recipe: Recipe, tmp_path: Path, d_model: int, pays: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto: bf16 on a CPU with native bf16 whose bf16 products are measured faster than fp32's
    (the measurement set both ways here), for a model at least CPU_BF16_MIN_D_MODEL wide, else
    fp32."""
    monkeypatch.setattr(precision, "bf16_matmul_pays", lambda: pays)
    cfg = recipe(precision="auto", model={"d_model": d_model, "n_heads": 2}, device="cpu")
    trainer = Trainer(cfg, tmp_path)
    wide = d_model >= CPU_BF16_MIN_D_MODEL
    assert trainer.precision == ("bf16" if native_bf16("cpu") and pays and wide else "fp32")


def test_an_unknown_precision_is_one_clear_error(recipe: Recipe) -> None:
    with pytest.raises(ValueError, match=r"precision='fp16'; choose from auto, fp32, bf16"):
        recipe(precision="fp16")
