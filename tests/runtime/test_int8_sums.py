"""int8 products exact on every CPU: where `torch._int_mm` saturates (no VNNI), the int8 layers
take 7-bit weights (`runtime.int8_choice.weight_levels`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXACT_SUMS = """
import json, torch, torch.nn as nn
from qkv.runtime.captured import Int8Linear
from qkv.runtime.int8_choice import int_mm_exact
torch.manual_seed(0)
layer = Int8Linear(nn.Linear(256, 96))
x = torch.randn(24, 256)
x[0] = 1.0  # every x at 127 once quantized: the largest pair sums
y = layer(x).double()
sx = x.abs().amax(1, keepdim=True) / 127
xq = torch.round(x / sx).long()
want = (xq @ layer.qweight.long().T).double() * (sx.double() * layer.scale.double()) + layer.bias
err = float((y - want).abs().max() / want.abs().max())
print(json.dumps({"exact": int_mm_exact(), "levels": int(layer.qweight.abs().max()), "err": err}))
"""


@pytest.mark.parametrize("isa", [None, "AVX2"])
def test_int8_layers_sum_exactly_where_the_cpu_saturates_int8_products(isa: str | None) -> None:
    """On a CPU with VNNI under oneDNN's AVX2 code (ONEDNN_MAX_CPU_ISA=AVX2) `torch._int_mm`
    saturates full-range int8 sums, and `Int8Linear` there takes 7-bit weights; on a CPU without
    VNNI it sums exactly (a loop of its own) and the weights keep 8 bits. Either way the outputs
    are the exact (int64) integer sums, scaled."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    done = subprocess.run(
        [sys.executable, "-c", EXACT_SUMS], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["err"] < 1e-6, found
    if isa == "AVX2" and "vnni" in Path("/proc/cpuinfo").read_text():
        assert not found["exact"] and found["levels"] == 63, found
    assert found["levels"] == (127 if found["exact"] else 63), found


def test_dynamic_int8_layers_take_7_bit_inputs_so_no_pair_sum_saturates() -> None:
    """`runtime.quantize`'s layers (torch's dynamic int8 Linear, either library) quantize each input
    to 128 levels (`reduce_range`): a u8 x s8 pair sum is then at most 2 * 127 * 128 = 32,512, within
    the 16 bits a CPU without VNNI sums pairs in (vpmaddubsw), so fbgemm and oneDNN cannot saturate.
    Counted on an identity layer, whose outputs are its quantized inputs."""
    import torch
    from torch import nn

    from qkv.runtime.quantize import int8_engines, quantize_int8

    n = 1000
    layer = nn.Linear(n, n, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(n))
    x = torch.linspace(-1.0, 3.0, n).unsqueeze(0)  # 1,000 distinct inputs
    for engine in int8_engines():
        quantized = quantize_int8(nn.Sequential(layer), engine=engine)
        with torch.inference_mode():
            y = quantized(x)
        assert len(torch.unique(y)) == 128, engine  # 7-bit inputs (256 at 8 bits)
        assert (y - x).abs().max() <= 4.0 / 127, engine  # each within a step of its input
