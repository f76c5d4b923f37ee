"""How a translator loads and runs its model, as one value: what `Translator.load`, the command line
and the server take, beside the `DecodeOptions` of each call.

    runtime = RuntimeOptions(device="cuda", precision="bf16", batch_tokens=8192)
    translator = Translator.load("runs/m30k-en-de", runtime)
    Translator.load("runs/m30k-en-de", RuntimeOptions(quantize="int8", workers=4))
    translator.runtime.replace(workers=2)                   # a changed copy, checked again

The value is frozen and checked when it is made: a bad value raises a ValueError in one line that
names the field, before any model loads. The device is checked to be usable on this machine
(`check_device`). The command line's defaults are this class's defaults.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

import torch

from .precision import check_precision
from .quantize import QUANTIZATIONS

DEFAULT_MAX_SRC_TOKENS = 1024  # longest source before truncation (subword tokens, eos included)
DEFAULT_BATCH_TOKENS = 4096  # most padded source tokens in a batch


@dataclass(frozen=True)
class RuntimeOptions:
    """Where and how the model runs.

    device: "cpu", "cuda", "cuda:N", "mps", ... (or a torch.device), usable on this machine.
    precision: weights and compute, "fp32", "bf16" or "auto": the faster of the two on this device
        (`runtime.choice`; bf16 only where it is native).
    quantize: "int8" (dynamic quantization of the linear layers, for the CPU; `runtime.quantize`)
        or None; int8 takes neither packed weights nor bf16.
    pack: linear weights packed for oneDNN (True; `runtime.packed`), kept as nn.Linear (False), or
        the faster of the two, measured on this CPU (None).
    capture: decode through a captured step (`runtime.captured`): the decoder's one-token step
        compiled by TorchInductor once per process (seconds), for the CPU; takes no packed weights.
    workers: batches decoded at once (`runtime.workers`): on a CPU, in forked processes of one
        torch thread each (give as many as cores) where the system forks, else in threads that
        share torch's threads; with fewer batches than workers, the largest batches are split so
        that each worker has one.
    threads: torch's CPU threads for the whole process, which a command sets before loading
        (`runtime.process.configure_process`); None: as torch has them. A translator does not set
        them.
    batch_tokens: the most padded source tokens in a batch (eos counted; a longer sentence goes
        alone).
    max_src_tokens: the longest source (subword tokens, eos included); a longer line is truncated,
        with a warning. An encoder with learned positions lowers it to its table size.
    """

    device: str | torch.device = "cpu"
    precision: str = "auto"
    quantize: str | None = None
    pack: bool | None = None
    capture: bool = False
    workers: int = 1
    threads: int | None = None
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    max_src_tokens: int = DEFAULT_MAX_SRC_TOKENS

    def __post_init__(self) -> None:
        check_device(self.device)
        check_precision(self.precision)
        if self.quantize is not None and self.quantize not in QUANTIZATIONS:
            raise ValueError(f"quantize={self.quantize!r}; choose from {QUANTIZATIONS}")
        if self.pack is not None and not isinstance(self.pack, bool):
            raise ValueError(f"pack must be True, False or None (measured), got {self.pack!r}")
        if self.quantize is not None and self.pack:
            raise ValueError("choose int8 quantization or packed float32 weights, not both")
        if self.capture and self.pack:
            raise ValueError("a captured step packs its weights itself: choose capture or pack")
        if self.quantize is not None and self.precision == "bf16":
            raise ValueError("choose int8 quantization or bf16 weights, not both")
        for name in ("workers", "batch_tokens", "max_src_tokens"):
            _check_int(name, getattr(self, name))
        if self.threads is not None:
            _check_int("threads", self.threads)
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 (None: torch's), got {self.threads}")
        if self.batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, got {self.batch_tokens}")
        if self.max_src_tokens < 2:
            raise ValueError(
                f"max_src_tokens must be >= 2 (a token and eos), got {self.max_src_tokens}"
            )

    def replace(self, **changes: object) -> RuntimeOptions:
        """A copy with some fields changed, checked like a new value."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _check_int(name: str, value: object) -> None:
    """An integer field takes an integer, not a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")


def check_device(device: str | torch.device) -> torch.device:
    """`torch.device(device)`, checked to be usable on this machine; a ValueError in one line says
    why not (an unknown name, no CUDA, a CUDA index beyond the devices there are, no MPS)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"unknown device {str(device)!r}; expected cpu, cuda, cuda:N, mps, ..."
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            built = "" if torch.version.cuda else " (this PyTorch is built without CUDA)"
            raise ValueError(f"device {str(device)!r}: CUDA is not available here{built}")
        n = torch.cuda.device_count()
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"device {str(device)!r}: there are {n} CUDA devices (cuda:0 ..)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r}: MPS is not available here")
    elif dev.type == "meta":
        raise ValueError("device 'meta' holds no data; translate on cpu, cuda or mps")
    elif dev.type != "cpu":
        try:
            torch.empty(1, device=dev)
        except (RuntimeError, AssertionError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]
            raise ValueError(f"device {str(device)!r} is not usable here: {reason}") from None
    return dev


__all__ = ["DEFAULT_BATCH_TOKENS", "DEFAULT_MAX_SRC_TOKENS", "RuntimeOptions", "check_device"]
