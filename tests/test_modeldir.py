"""Model directories: weights round-trip bit for bit (tied ones stay tied), bad files are clear errors, older
layouts still load, and loading does not hold a second copy of the weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from qkv import DecoderOnly, Transformer, TransformerConfig
from qkv.modeldir import WEIGHTS_FILE, CheckpointError, load_model_dir, load_weights, save_model_dir


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


def test_an_older_layout_goes_through_the_state_dict_hooks(tmp_path: Path) -> None:
    """Cross-attention weights stored fused ([W^Q; W^K; W^V] in one in_proj) load into q_proj + kv_proj."""
    torch.manual_seed(2)
    model = Transformer(tiny(tie_output=False, share_embeddings=False, tgt_vocab_size=50)).eval()
    old = {k: v.clone() for k, v in model.state_dict().items()}
    for i in range(model.config.n_decoder_layers):
        prefix = f"decoder.layers.{i}.cross_attn."
        weight, bias = model.decoder.layers[i].cross_attn.projection()
        for k in ("q_proj.weight", "q_proj.bias", "kv_proj.weight", "kv_proj.bias"):
            del old[prefix + k]
        old[prefix + "in_proj.weight"], old[prefix + "in_proj.bias"] = weight.clone(), bias.clone()
    save_file(old, str(tmp_path / "old.safetensors"))
    loaded = Transformer(model.config).eval()
    load_weights(tmp_path / "old.safetensors", loaded)
    src, tgt = torch.randint(4, 50, (2, 7)), torch.randint(4, 50, (2, 5))
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt))


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
