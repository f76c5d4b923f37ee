"""Training memory over many batch shapes: RSS stays bounded (docs/benchmarks.md, "Training memory").

bf16 training on a CPU with native bf16 builds oneDNN primitives for every new matrix-product shape, and with
glibc's kept freed memory the heap fragments around them: RSS grows by gigabytes over a few hundred updates.
`qkv train` restarts itself with tcmalloc where it is installed; this runs the same settings, in a fresh
process, over 60 distinct batch shapes: without tcmalloc RSS grows by a third from the 20th shape
to the 60th (1,303 to 1,741 MiB on an AMD EPYC with avx512_bf16), with it by 7% (1,105 to 1,179)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qkv.runtime.precision import native_bf16
from qkv.runtime.process import tcmalloc_library

SCRIPT = """
import random, sys, torch
from qkv.config import TransformerConfig
from qkv.model.transformer import Transformer
from qkv.runtime.process import configure_process, restart_with_tcmalloc, tcmalloc_loaded
from qkv.runtime.training import prepare_for_training
from qkv.train.loss import TranslationLoss
from qkv.train.recipe import TrainConfig

restart_with_tcmalloc()  # as `qkv train` does on a CPU
configure_process(**{**TrainConfig(corpus="synthetic").process_settings(), "threads": 2})
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
model = Transformer(TransformerConfig(d_model=256, d_ff=1024, n_heads=4, n_encoder_layers=2,
                                      n_decoder_layers=2, src_vocab_size=4000, norm_first=True))
prepare_for_training(model, "bf16", torch.device("cpu"))
loss_fn, rng = TranslationLoss(model, 0.1), random.Random(0)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
rss = []
for step in range(60):
    s, t = rng.randint(8, 60), rng.randint(8, 60)  # a new (rows, S, T) nearly every step
    rows = 4096 // max(s, t)
    src, tgt = torch.randint(4, 4000, (rows, s)), torch.randint(4, 4000, (rows, t + 1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = loss_fn(src, tgt[:, :-1], tgt[:, 1:])
    (loss / 1000).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    rss.append(rss_mib())
print(tcmalloc_loaded(), rss[19], rss[-1])
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS from /proc")
@pytest.mark.skipif(not native_bf16("cpu"), reason="bf16 products go through oneDNN's primitives only here")
def test_bf16_training_over_many_batch_shapes_keeps_its_memory() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("QKV_RESTARTED_WITH", "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded, early, late = out.stdout.split()
    assert (loaded == "True") == (tcmalloc_library() is not None)
    assert float(late) <= 1.2 * float(early), (early, late)  # after 20 shapes and after 60
