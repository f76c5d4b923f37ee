"""int8 dynamic quantization for CPU decoding.

Every `nn.Linear` (the attention projections, the feed-forward network, the output projection) gets
int8 weights with one scale per output row; its input is quantized on the fly, per call, from its
own range, and the matmul runs in int8 with int32 accumulation. Embeddings, layer norms and the
attention itself stay in float32. Weights shrink 4x, which is what a memory-bound batch-1 decoder is
waiting on.

torch has two int8 libraries on x86, fbgemm and oneDNN, equal in their numbers, not in speed:
`quantize_int8_measured` gives the encoder's and the decoder's layers each the one that is faster
on this CPU at their row counts (`faster_int8_engine`: measured once per CPU and shape; fbgemm
stays unless oneDNN takes at most `ENGINE_MARGIN` of its time).

    translator = Translator.load("runs/m30k-en-de", RuntimeOptions(quantize="int8"))
    # or, from the command line: qkv translate --quantize int8
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import nn

from .measure import ROWS, alternate, cache_file, cache_key, fastest, read_verdicts, write_verdict
from .precision import cpu_flags

QUANTIZATIONS = ("int8",)
ENGINE_MARGIN = 0.9  # oneDNN replaces fbgemm where it takes at most this share of fbgemm's time
MANY_ROWS = (24, 768)  # the encoder's rows per call: one sentence's tokens, 32 sentences'
FEW_ROWS = ROWS  # a decoding step's: one sentence, 32 (as the decoding path is timed)
# (engine, rows) -> seconds of one pass of the layers over inputs of `rows` rows
Timer = Callable[[str, int], float]


def int8_engines() -> list[str]:
    """torch's int8 libraries on this machine, the default first: fbgemm and oneDNN on x86,
    torch's own choice elsewhere (qnnpack on ARM)."""
    x86 = [e for e in ("fbgemm", "onednn") if e in torch.backends.quantized.supported_engines]
    return x86 or [torch.backends.quantized.engine]


def quantize_int8(
    model: nn.Module,
    inplace: bool = False,
    only: Iterable[str] | None = None,
    engine: str | None = None,
) -> nn.Module:
    """An int8 copy of `model` for CPU inference.

    The original is left as it is, unless `inplace`: then its linear layers are swapped, which saves
    holding a float copy. Tied weights are untied: the quantized output projection no longer shares
    the embedding matrix. only: the dotted names of the submodules whose linear layers become int8
    (default: every linear layer). engine: the int8 library ("fbgemm", "onednn"; default: the
    first of `int8_engines()`); each quantized layer records it as `int8_engine`.
    """
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError(
            "int8 dynamic quantization runs on the CPU; load the model with device='cpu'"
        )
    engine = engine or int8_engines()[0]
    torch.backends.quantized.engine = engine  # the weights are packed for it
    model = (model if inplace else copy.deepcopy(model)).eval()
    # torch.ao.quantization announces its move to torchao (and away from qint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings(
            "ignore", message=".*quantized tensor creation functions.*", category=UserWarning
        )
        targets = [nn.Linear] if only is None else list(only)  # a module class, or names
        spec = dict.fromkeys(targets, per_channel_dynamic_qconfig)
        model = quantize_dynamic(model, spec, dtype=torch.qint8, inplace=inplace)
    for module in model.modules():
        if isinstance(module, DynamicInt8Linear) and not hasattr(module, "int8_engine"):
            module.int8_engine = engine
    return model


def many_row_layers(names: Iterable[str]) -> list[str]:
    """The layers among `names` that multiply many rows per call: the encoder's, and the
    cross-attention's memory projections (every source token at once)."""
    return [n for n in names if n.startswith("encoder.") or n.endswith("cross_attn.kv_proj")]


def quantize_int8_measured(model: nn.Module, only: Iterable[str] | None = None) -> nn.Module:
    """`model` quantized in place like `quantize_int8`, the many-row layers (`many_row_layers`)
    and the others each with the library `faster_int8_engine` measures faster at their rows."""
    linears = {n: m for n, m in model.named_modules() if type(m) is nn.Linear}
    names = list(linears) if only is None else [n for n in only if n in linears]
    many = many_row_layers(names)
    for group, rows in ((many, MANY_ROWS), ([n for n in names if n not in many], FEW_ROWS)):
        if group:
            engine = faster_int8_engine([linears[n] for n in group], rows)
            quantize_int8(model, inplace=True, only=group, engine=engine)
    return model


def int8_engine_note(model: nn.Module) -> str:
    """Which library runs the model's dynamic int8 layers, a clause for a decoding path's line:
    "; torch's int8 layers: fbgemm 13, onednn 12 (...)" ("" where there are none)."""
    engines = Counter(getattr(m, "int8_engine", None) for m in model.modules())
    engines.pop(None, None)
    if not engines:
        return ""
    counts = ", ".join(f"{e} {n}" for e, n in sorted(engines.items()))
    return f"; torch's int8 layers: {counts} (each group's library measured faster at its rows)"


def faster_int8_engine(
    linears: list[nn.Linear],
    rows: tuple[int, ...],
    timer: Timer | None = None,
    cache: Path | None = None,
) -> str:
    """The int8 library that multiplies inputs of each of `rows` rows by `linears` faster on this
    CPU (`choose_engine`), measured once per CPU, torch, threads and shapes: the verdict is kept
    in `cache` (default: `runtime.measure.cache_file()`) beside the decoding paths'. timer:
    seconds of one pass over the layers (default: `time_int8_layers`)."""
    engines = int8_engines()
    if len(engines) == 1 or not linears:
        return engines[0]
    shapes = [(m.in_features, m.out_features) for m in linears]
    key = f"{cache_key(shapes, cpu_flags())} | int8 library at rows {list(rows)} of {engines}"
    cache = cache_file() if cache is None else cache
    kept = read_verdicts(cache).get(key)
    if isinstance(kept, dict) and kept.get("engine") in engines:
        return kept["engine"]
    engines = agreeing_engines(linears, engines)
    chosen = engines[0]
    if len(engines) > 1:
        timer = timer or time_int8_layers(linears, engines, repeats=5)
        chosen = choose_engine({e: {r: timer(e, r) for r in rows} for e in engines})
    write_verdict(cache, key, {"engine": chosen})
    return chosen


def agreeing_engines(linears: list[nn.Linear], engines: list[str]) -> list[str]:
    """The default library (`engines[0]`) and those whose int8 copy of each layer of `linears`
    gives the default's outputs on this CPU (to 1e-4 of the largest), on four random rows and
    one whose every input is the largest (where a u8 x s8 product without VNNI saturates its
    pair sums): a library wrong here is not timed, let alone chosen."""
    one_each = list({(m.in_features, m.out_features): m for m in linears}.values())
    copies = {e: quantize_int8(nn.ModuleList(one_each), engine=e) for e in engines}
    kept = engines[:1]
    with torch.inference_mode():
        inputs = [
            torch.cat([torch.randn(4, m.in_features), torch.full((1, m.in_features), 4.0)])
            for m in one_each
        ]
        want = [layer(x) for layer, x in zip(copies[engines[0]], inputs, strict=True)]
        for engine in engines[1:]:
            got = [layer(x) for layer, x in zip(copies[engine], inputs, strict=True)]
            if all(
                (g - w).abs().max() <= 1e-4 * w.abs().max() for g, w in zip(got, want, strict=True)
            ):
                kept.append(engine)
    return kept


def choose_engine(seconds: dict[str, dict[int, float]]) -> str:
    """The first library (the default) unless another's seconds, each divided by the least at
    its row count, sum to at most `ENGINE_MARGIN` of the default's (`runtime.measure.fastest`)."""
    return fastest(seconds, ENGINE_MARGIN)


def time_int8_layers(linears: list[nn.Linear], engines: list[str], repeats: int) -> Timer:
    """A `Timer` over each library's int8 copy of one layer per distinct shape among `linears`:
    a pass is each shape's median call (of `repeats`, after a warm-up that builds the kernels)
    times its count, on random rows; the libraries alternate call by call
    (`runtime.measure.alternate`), so a busy moment costs them alike."""
    shapes = Counter((m.in_features, m.out_features) for m in linears)
    one_each = list({(m.in_features, m.out_features): m for m in linears}.values())
    copies = {e: quantize_int8(nn.ModuleList(one_each), engine=e) for e in engines}
    passes: dict[tuple[str, int], float] = {}

    def measure(rows: int) -> None:
        per_shape: dict[str, list[float]] = {e: [] for e in engines}
        with torch.inference_mode():
            for i, layer in enumerate(one_each):
                x = torch.randn(rows, layer.in_features)
                runs = {e: lambda f=copies[e][i], x=x: f(x) for e in engines}
                for engine, timing in alternate(runs, repeats).items():
                    per_shape[engine].append(timing.seconds)
        counts = [shapes[m.in_features, m.out_features] for m in one_each]
        for engine in engines:
            passes[engine, rows] = sum(
                n * t for n, t in zip(counts, per_shape[engine], strict=True)
            )

    def timer(engine: str, rows: int) -> float:
        if (engine, rows) not in passes:
            measure(rows)
        return passes[engine, rows]

    return timer
