"""Which decoding path runs fastest on this CPU: precision and weight packing, chosen by measuring.

Whether packed weights (`runtime.packed`) or plain `nn.Linear`, bf16 or float32 decode faster
depends on the CPU and the model's shape, not on a flag one can read (docs/benchmarks.md, "Default
decoding path"). So `choose_decoding_path` decodes a few greedy steps with the model itself in each
path the CPU supports, for 1 and 32 sentences, and keeps the fastest (`runtime.measure.fastest`),
never a packed path whose hypotheses differ from its plain twin's here. Where plain weights decode
one sentence faster and packed ones a batch, a third path takes both (`with_plain_rows`: twice the
weight memory). bf16 is a candidate only where it is native (`runtime.precision`). The verdict is
kept per CPU, torch version, threads and shape (`runtime.measure`): timed once per machine.

    path = choose_decoding_path(model, "cpu")   # what the user left open is measured
    print(path.why)                             # decoding path: bf16, packed weights (...)
    prepare_for_decoding(model, RuntimeOptions(pack=path.pack, precision=path.precision),
                         path.plain_rows)
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..decode.search import greedy
from .measure import ROWS, alternate, cache_file, cache_key, fastest, read_verdicts, write_verdict
from .packed import PackedLinear, packing_available
from .precision import cpu_flags, native_bf16, resolve_precision, torch_dtype
from .prepare import prepare_for_decoding
from .runtime_options import RuntimeOptions

# (precision, pack) -> {rows: seconds of greedy decoding a few tokens}
Timings = dict[tuple[str, bool], dict[int, float]]
Measure = Callable[[nn.Module, list[tuple[str, bool]]], Timings]


@dataclass(frozen=True)
class DecodingPath:
    """A resolved decoding path: "fp32" or "bf16", packed or plain weights, and why (one line);
    plain_rows: packed layers multiply inputs of at most that many rows by the plain weights."""

    precision: str
    pack: bool
    why: str
    plain_rows: int = 0


CUDNN_ATTENTION_NOTE = (
    "bf16 decoding on CUDA with cuDNN's attention on: it builds a graph for every new shape, and "
    "each decoding step has a new one (several times slower: docs/benchmarks.md, 'Decoding on "
    "CUDA'); "
    "qkv.runtime.process.configure_process(cudnn_attention=False) turns it off, as the qkv "
    "commands do"
)


def step_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """(in, out) of every linear layer one decoding step multiplies: the decoder's and the output
    projection's (all of the model's where it has no `decoder`)."""
    parts = [getattr(model, "decoder", model), getattr(model, "output_projection", None)]
    shapes = []
    for part in filter(None, parts):
        for module in part.modules():
            if isinstance(module, nn.Linear | PackedLinear):
                shapes.append((module.in_features, module.out_features))
    return shapes


def candidates(precision: str, pack: bool | None, flags: set[str]) -> list[tuple[str, bool]]:
    """The (precision, pack) pairs open to a CPU with `flags` under the user's settings."""
    if precision == "auto":
        precisions = ["fp32", "bf16"] if native_bf16("cpu", flags) else ["fp32"]
    else:
        precisions = [resolve_precision(precision, "cpu", flags)]
    out = []
    for p in precisions:
        packs = [pack] if pack is not None else [False, True]
        out += [(p, k) for k in packs if not k or packing_available(torch_dtype(p))]
    return out


def time_greedy_steps(
    model: nn.Module, paths: list[tuple[str, bool]], steps: int = 8, repeats: int = 3
) -> Timings:
    """Median seconds of greedy decoding `steps` tokens for 1 and for 32 random sources (each of
    ROWS) with a copy of `model` prepared in each path; the paths alternate, so a busy moment
    costs them alike (`runtime.measure.alternate`). A packed path whose hypotheses'
    log-probabilities are not its plain twin's (`agree`) is left out: it is wrong on this CPU,
    however fast."""
    prepared = {
        path: prepare_for_decoding(
            copy.deepcopy(model), RuntimeOptions(precision=path[0], pack=path[1])
        )
        for path in paths
    }
    vocab = model.config.src_vocab_size
    generator = torch.Generator().manual_seed(0)
    out: Timings = {path: {} for path in paths}
    wrong: set[tuple[str, bool]] = set()
    for rows in ROWS:
        src = torch.randint(4, vocab, (rows, 16), generator=generator)
        runs = {
            path: lambda m=prepared[path], src=src: greedy(m, src, min_len=steps, max_len=steps)
            for path in paths
        }
        timed = alternate(runs, repeats)
        found = {path: t.result for path, t in timed.items()}
        wrong |= {path for path in paths if not agree(found, path)}
        for path in paths:
            out[path][rows] = timed[path].seconds
    return {path: t for path, t in out.items() if path not in wrong}


def agree(found: dict[tuple[str, bool], list], path: tuple[str, bool]) -> bool:
    """Whether the greedy hypotheses `found` in `path` have the log-probabilities of those in
    its plain twin (same precision), to 1e-3 of theirs in float32 and 2e-2 in bf16 (packed
    weights compute the same products, in another order); a plain path is its own twin."""
    twin = found.get((path[0], False))
    if twin is None:
        return True
    tolerance = 1e-3 if path[0] == "fp32" else 2e-2
    pairs = zip(found[path], twin, strict=True)
    return all(abs(a.logprob - b.logprob) <= tolerance * (abs(b.logprob) + 1) for a, b in pairs)


def with_plain_rows(timings: Timings) -> dict[tuple[str, bool, int], dict[int, float]]:
    """The measured paths as (precision, pack, 0), and for each packed path whose plain twin
    decoded one row faster, (precision, True, 1): packed weights with one-row inputs multiplied by
    the plain ones (both kept), timed as the twin at one row and the packed path at more."""
    out = {(p, k, 0): t for (p, k), t in timings.items()}
    for (p, packed), t in timings.items():
        plain = timings.get((p, False))
        if packed and plain is not None and plain[1] < t[1]:
            out[p, True, 1] = {**t, 1: plain[1]}
    return out


def describe(path: tuple, timings: Timings | None, source: str) -> str:
    """The line printed about a choice, path (precision, pack[, plain_rows]), and the step times
    behind it."""
    weights = "packed" if path[1] else "plain"
    one_row = " (plain for one row)" if len(path) > 2 and path[2] else ""
    name = f"{path[0]}, {weights} weights{one_row}"
    if not timings:
        return f"decoding path: {name} ({source})"
    times = "; ".join(
        f"{p}{' packed' if k else ''} {' / '.join(f'{t[r] * 1e3:.2f}' for r in ROWS)} ms"
        for (p, k), t in sorted(timings.items())
    )
    rows = " / ".join(map(str, ROWS))
    return f"decoding path: {name} ({source}; greedy steps for {rows} sentences: {times})"


def choose_decoding_path(
    model: nn.Module,
    device: str | torch.device,
    precision: str = "auto",
    pack: bool | None = None,
    flags: set[str] | None = None,
    measure: Measure | None = None,
    cache: Path | None = None,
) -> DecodingPath:
    """The decoding path for `model` on `device` under the user's settings: what they fixed is
    kept; what is open ("auto" precision, pack None) is chosen by measuring on a CPU (module
    docstring), or by rule elsewhere (bf16 where native, plain weights). flags: the CPU's flags
    (default: read now); measure: the timing function (None: `time_greedy_steps`); cache:
    the verdicts' file (None: `cache_file()`)."""
    dev = torch.device(device)
    if dev.type != "cpu":
        chosen = (resolve_precision(precision, dev), bool(pack))
        if dev.type == "cuda" and chosen[0] == "bf16" and torch.backends.cuda.cudnn_sdp_enabled():
            warnings.warn(CUDNN_ATTENTION_NOTE, stacklevel=2)
        return DecodingPath(*chosen, describe(chosen, None, f"{dev}: by rule"))
    flags = cpu_flags() if flags is None else flags
    paths = candidates(precision, pack, flags)
    if len(paths) == 1:
        return DecodingPath(*paths[0], describe(paths[0], None, "as set"))
    shapes = step_shapes(model)
    # a verdict among fewer paths (the user fixed one setting) is not one among all
    among = ",".join(f"{p}{'+pack' if k else ''}" for p, k in paths)
    key = f"{cache_key(shapes, flags)} | {among}"
    cache = cache_file() if cache is None else cache
    verdict = read_verdicts(cache).get(key)
    if isinstance(verdict, dict):
        chosen = (verdict.get("precision"), verdict.get("pack"), verdict.get("plain_rows", 0))
        if chosen[:2] in paths and chosen[2] in (0, 1):
            why = describe(chosen, None, f"measured before, {cache}")
            return DecodingPath(chosen[0], chosen[1], why, chosen[2])
    timings = (measure or time_greedy_steps)(model, paths)
    chosen = fastest(with_plain_rows(timings))
    write_verdict(cache, key, dict(zip(("precision", "pack", "plain_rows"), chosen, strict=True)))
    return DecodingPath(chosen[0], chosen[1], describe(chosen, timings, "measured now"), chosen[2])


__all__ = [
    "DecodingPath",
    "candidates",
    "choose_decoding_path",
    "step_shapes",
    "time_greedy_steps",
    "with_plain_rows",
]
