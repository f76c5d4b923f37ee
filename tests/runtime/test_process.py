"""Process-wide settings (qkv.runtime.process), each checked in a fresh process.

configure_process sets the threads, seeds and attention backend it is given and nothing else.
keep_freed_memory: a training-like step (large logits, log-softmax, backward) run again must reuse the memory
the last step freed instead of mapping fresh pages (page faults) for every large tensor."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import resource, sys, torch
from qkv.runtime.process import keep_freed_memory
torch.set_num_threads(1)
if sys.argv[1] == "keep":
    assert keep_freed_memory()
w = torch.randn(64, 10000, requires_grad=True)
h = torch.randn(3000, 64)
def faults_of_one_step():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    (h @ w).log_softmax(-1).mean().backward()  # 120 MB logits (half of multi30k-small's)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
for _ in range(5):  # the first step faults its pages in either way; with keep_freed_memory the heap then grows
    faults_of_one_step()  # for a few steps (by whole logits-sized blocks) until the freed blocks fit the next step's
print(min(faults_of_one_step() for _ in range(3)))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_training_step_reuses_freed_memory_only_with_keep_freed_memory() -> None:
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    logits_pages = 3000 * 10000 * 4 // 4096
    default = faults("default")
    assert default > 3 * logits_pages  # munmap on free: logits, log-softmax and their grads fault in every step
    # from the 4th-6th step on, freed blocks are reused as they are (0 faults; steps 2-4 may still fault one
    # or two logits-sized blocks: heap placement varies); without keep_freed_memory this would equal `default`
    assert faults("keep") <= default // 3


CONFIGURE = """
import random, sys
import numpy as np, torch
from qkv.runtime.process import configure_process
threads = torch.get_num_threads()
state = torch.get_rng_state()
assert torch.backends.cuda.cudnn_sdp_enabled()  # torch's default, also in CPU builds
configure_process()  # nothing asked: nothing changes
assert torch.get_num_threads() == threads and torch.equal(torch.get_rng_state(), state)
assert torch.backends.cuda.cudnn_sdp_enabled()
import os
assert "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ
configure_process(threads=1, seed=7, keep_freed_memory=sys.platform.startswith("linux"),
                  cudnn_attention=False, onednn_primitive_cache=16)
assert torch.get_num_threads() == 1 and not torch.backends.cuda.cudnn_sdp_enabled()
assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "7"  # the user's own setting wins
configure_process(onednn_primitive_cache=16)
assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "7"
drawn = (torch.rand(3).tolist(), np.random.rand(), random.random())
torch.manual_seed(7); np.random.seed(7); random.seed(7)
assert drawn == (torch.rand(3).tolist(), np.random.rand(), random.random()), drawn
print("ok")
"""


def test_configure_process_sets_threads_and_seeds_and_nothing_unasked() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    out = subprocess.run([sys.executable, "-c", CONFIGURE], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


RELEASE = """
import torch
from qkv.runtime.process import keep_freed_memory, release_freed_memory
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
assert keep_freed_memory()
held = [torch.ones(2**20) for _ in range(200)]  # 800 MB in 4 MB blocks on the heap (never mmap'ed)
keep = torch.ones(16)  # a small block above them: the heap's top cannot simply shrink
del held
kept = rss_mib()
assert release_freed_memory()
print(kept, rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_freed_memory_returns_the_pages_that_keep_freed_memory_keeps() -> None:
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    kept, released = map(float, out.stdout.split())
    assert kept - released > 600  # of the 800 MB freed
