"""Model directories: weights round-trip bit for bit (tied ones stay tied), bad files are clear errors,
files are copied by their names, and loading does not hold a second copy of the weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from qkv import DecoderOnly, Transformer, TransformerConfig
from qkv.modeldir import (
    CONFIG_FILE,
    SPM_JOINT_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    copy_config_and_tokenizer,
    load_model_dir,
    load_weights,
    save_model_dir,
    save_weights,
)


def tiny(**overrides: object) -> TransformerConfig:
    return TransformerConfig.preset("tiny", **{"src_vocab_size": 50, **overrides})


@pytest.mark.parametrize("model", [
    Transformer(tiny()),  # shared source/target embedding, tied output projection
    Transformer(tiny(share_embeddings=False, tgt_vocab_size=40, tie_output=False)),
    DecoderOnly(tiny()),
], ids=["tied", "untied", "decoder-only"])
def test_round_trip_is_exact_and_keeps_ties(model: torch.nn.Module, tmp_path: Path) -> None:
    torch.manual_seed(1)
    save_model_dir(tmp_path, model)
    loaded = load_model_dir(tmp_path)
    assert type(loaded) is type(model) and loaded.config == model.config
    saved, got = model.state_dict(), loaded.state_dict()
    assert saved.keys() == got.keys()
    for name in saved:
        assert torch.equal(saved[name], got[name]), name
    if isinstance(model, Transformer) and model.config.tie_output:  # one tensor, as in the built model
        assert loaded.output_projection.weight is loaded.decoder.embedding.lookup.weight


class OneBuffer(torch.nn.Module):
    """Weights as views of one flat buffer, as cuDNN's RNNs keep theirs on CUDA, and a tied one."""

    def __init__(self, fill: float | None = None) -> None:
        super().__init__()
        flat = torch.arange(10.0) if fill is None else torch.full((10,), fill)
        self.b, self.c = torch.nn.Parameter(flat[:4]), torch.nn.Parameter(flat[4:])
        self.a = self.b  # tied: stored once, under its first name in sorted order


def test_weights_that_share_a_buffer_are_stored_each_on_its_own(tmp_path: Path) -> None:
    model, loaded = OneBuffer(), OneBuffer(fill=-1.0)
    save_weights(tmp_path / WEIGHTS_FILE, model)
    with safe_open(str(tmp_path / WEIGHTS_FILE), framework="pt") as f:
        assert sorted(f.keys()) == ["a", "c"]
    load_weights(tmp_path / WEIGHTS_FILE, loaded)
    assert loaded.a is loaded.b and torch.equal(loaded.b, model.b) and torch.equal(loaded.c, model.c)


def test_truncated_or_mismatched_weights_are_clear_errors(tmp_path: Path) -> None:
    save_model_dir(tmp_path / "a", Transformer(tiny()))
    with pytest.raises(CheckpointError, match=r"shape|size"):
        load_weights(tmp_path / "a" / WEIGHTS_FILE, Transformer(tiny(d_ff=48)))
    weights = tmp_path / "a" / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated"):
        load_model_dir(tmp_path / "a")
    with pytest.raises(CheckpointError, match="missing file"):
        load_weights(tmp_path / "nothing.safetensors", Transformer(tiny()))


def test_weights_must_be_exactly_the_models_tensors(tmp_path: Path) -> None:
    """A file lacking one of the model's tensors, or holding one the model does not have, is a
    CheckpointError that names it; nothing is loaded by another route."""
    model = Transformer(tiny(tie_output=False, share_embeddings=False, tgt_vocab_size=50))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    missing = dict(state)
    del missing["encoder.layers.0.feed_forward.w_1.weight"]
    save_file(missing, str(tmp_path / "missing.safetensors"))
    with pytest.raises(CheckpointError, match=r"encoder\.layers\.0\.feed_forward\.w_1\.weight"):
        load_weights(tmp_path / "missing.safetensors", Transformer(model.config))
    save_file({**state, "extra.weight": torch.zeros(2)}, str(tmp_path / "extra.safetensors"))
    with pytest.raises(CheckpointError, match=r"extra\.weight"):
        load_weights(tmp_path / "extra.safetensors", Transformer(model.config))


def test_config_and_tokenizer_files_are_copied_by_name(tmp_path: Path) -> None:
    """copy_config_and_tokenizer copies config.json and the tokenizer files that exist, nothing else,
    and leaves no temporary file behind."""
    source = tmp_path / "run"
    save_model_dir(source, Transformer(tiny()))
    for name in (TOKENIZER_FILE, SPM_JOINT_FILE, "log.csv"):
        (source / name).write_bytes(name.encode())
    copy_config_and_tokenizer(source, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(
        [CONFIG_FILE, TOKENIZER_FILE, SPM_JOINT_FILE])
    for name in (CONFIG_FILE, TOKENIZER_FILE, SPM_JOINT_FILE):
        assert (tmp_path / "copy" / name).read_bytes() == (source / name).read_bytes()


SHAPE = {"name": "tiny", "src_vocab_size": 1000, "d_model": 512, "d_ff": 2048, "n_heads": 8, "n_encoder_layers": 4,
         "n_decoder_layers": 4}
LOAD_PEAK = f"""
SHAPE = {SHAPE!r}
import sys
from qkv import Transformer, TransformerConfig
from qkv.modeldir import load_weights
def mb(field):
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(field + ':')) / 1024
model = Transformer(TransformerConfig.preset(**SHAPE))  # ~120 MB of weights, in tensors of 4 MB at most
before = mb('VmRSS')
if mb('VmHWM') - before > 10:  # building left a higher peak behind: reset the high-water mark
    open('/proc/self/clear_refs', 'w').write('5')
load_weights(sys.argv[1], model)
print(mb('VmHWM') - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_loading_does_not_hold_a_second_copy_of_the_weights(tmp_path: Path) -> None:
    """Peak memory (VmHWM) while loading ~120 MB of weights into a built model grows by less than a quarter of
    them; holding the whole file (mapped or copied) next to the model would add all of it."""
    model = Transformer(TransformerConfig.preset(**SHAPE))
    save_model_dir(tmp_path, model)
    size_mb = (tmp_path / WEIGHTS_FILE).stat().st_size / 2**20
    assert size_mb > 100
    out = subprocess.run([sys.executable, "-c", LOAD_PEAK, str(tmp_path / WEIGHTS_FILE)], capture_output=True,
                         text=True, check=True)
    assert float(out.stdout) < size_mb / 4, (out.stdout, size_mb)
