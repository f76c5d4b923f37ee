"""Decoding options as one value: what the translator, the command line and a server take.

    options = DecodeOptions(beam=5, alpha=1.0, nbest=2)
    translator.translate(texts, options)
    translator.translate(texts, options.replace(sampling=True, nbest=1, top_p=0.9, seed=3))

The value is frozen and checked when it is made: a bad value raises a ValueError that names the
field, before any model runs. The command line's defaults are this class's defaults.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# maximum output length = max_len_a * source length + max_len_b (a = 1 by default)
DEFAULT_MAX_LEN_B = 50
MAX_OUTPUT_TOKENS = 8192  # the longest output of one sentence, whatever max_len_a and max_len_b say


def option(
    default: Any,
    help: str,
    group: str,
    *,
    flag: str | None = None,
    native: bool = False,
    request_default: Any = None,
    explain: bool = False,
    serve: bool = False,
    tokens: bool = False,
) -> Any:
    """A `DecodeOptions` field and where it is exposed, as its metadata (read by `option_names`):

    help: its line of help (`qkv translate -h`) and its description in the HTTP request bodies.
    group: the commands that take it as a flag besides `qkv translate` (which takes every field):
        "search" (beam search and its limits: evaluate, attention), "sampling" (generate),
        "output" (none).
    flag: its command-line flag where not --NAME ("_" written "-").
    native: a field of /v1/translate's body, default `request_default` (None: the server's).
    explain: a field of /v1/explain's body (None: the server's).
    serve: a flag of `qkv serve`: the server's default for the requests that leave it unset.
    tokens: a number of output tokens: 0 to MAX_OUTPUT_TOKENS, and at most a server's
        --max-output-tokens.
    """
    metadata = {"help": help, "group": group, "flag": flag, "native": native}
    metadata |= {"request_default": request_default, "explain": explain, "serve": serve}
    return field(default=default, metadata={**metadata, "tokens": tokens})


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode each sentence.

    beam: beam size; 1 is greedy decoding.
    alpha: length penalty ((5 + length) / 6) ** alpha (GNMT); it ranks the beam's hypotheses and
        gives every hypothesis its score.
    nbest: how many hypotheses to return per sentence, best first (1 <= nbest <= beam; 1 when
        sampling).
    max_len_a, max_len_b: a sentence's output has at most max_len_a * source tokens + max_len_b
        tokens (subword tokens, eos counted in neither), and never more than MAX_OUTPUT_TOKENS.
    min_len: eos is forbidden before this many tokens (the length limit still ends the output).
    sampling: draw each token from the model's distribution instead of searching, reshaped by
        temperature, top_k (the k most probable tokens; 0: all) and top_p (the smallest set of most
        probable tokens with mass >= top_p; 1.0: all).
    seed: the sampling draws of the translator's batch i use seed + i (0 <= seed < 2**63).

    Each field's metadata says where the field is exposed, and every list of decoding fields
    (the command-line flags, the HTTP request bodies, `qkv serve`'s defaults) is read from it
    (`option_names`): a new field is declared here once, with `option(...)`.
    """

    beam: int = option(
        4, "beam size; 1 is greedy decoding", "search", native=True, explain=True, serve=True
    )
    alpha: float = option(
        0.6,
        "length penalty ((5 + length) / 6) ** alpha",
        "search",
        native=True,
        explain=True,
        serve=True,
    )
    nbest: int = option(
        1,
        "hypotheses per sentence, best first (at most the beam)",
        "output",
        native=True,
        request_default=1,
    )
    max_len_a: float = option(
        1.0, "a of the output limit: a * source tokens + b", "search", native=True, serve=True
    )
    max_len_b: int = option(
        DEFAULT_MAX_LEN_B,
        "b of the output limit: a * source tokens + b",
        "search",
        native=True,
        serve=True,
        tokens=True,
    )
    min_len: int = option(
        0, "no end of sentence before this many tokens", "search", native=True, tokens=True
    )
    sampling: bool = option(
        False, "sample instead of beam search (one hypothesis)", "sampling", flag="--sample"
    )
    temperature: float = option(1.0, "sampling temperature", "sampling")
    top_k: int = option(0, "sample from the k most probable tokens; 0: all", "sampling")
    top_p: float = option(1.0, "sample from the smallest set with mass >= p; 1.0: all", "sampling")
    seed: int = option(0, "sampling seed; batch i draws with seed + i", "sampling")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(self, f.name, OPTION_TYPES[f.name])
        if self.beam < 1:
            raise ValueError(f"beam must be >= 1 (1 is greedy decoding), got {self.beam}")
        if self.sampling and self.nbest != 1:
            raise ValueError(
                f"nbest={self.nbest}: sampling draws one hypothesis per sentence; use nbest=1"
            )
        if not 1 <= self.nbest <= self.beam:
            raise ValueError(
                f"nbest={self.nbest} must be between 1 and the beam size (beam={self.beam})"
            )
        if not math.isfinite(self.alpha):
            raise ValueError(f"alpha must be a finite number, got {self.alpha}")
        if not (math.isfinite(self.max_len_a) and self.max_len_a >= 0):
            raise ValueError(f"max_len_a must be a finite number >= 0, got {self.max_len_a}")
        for name in TOKEN_COUNTS:
            value = getattr(self, name)
            if not 0 <= value <= MAX_OUTPUT_TOKENS:
                raise ValueError(f"{name} must be between 0 and {MAX_OUTPUT_TOKENS}, got {value}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: all tokens), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")

    @property
    def beam_search(self) -> bool:
        """Whether these options decode by beam search (greedy at beam 1), as a trace shows it
        and a glossary's constraints need it; False for an algorithm that replaces it."""
        return not self.sampling

    def work(self, source_tokens: Iterable[int], widths: Iterable[int] | None = None) -> int:
        """The decoding a batch of sentences may take, in decode tokens: each sentence's width
        (the hypotheses its search keeps; default the beam) times its output length limit,
        summed over the sentences of `source_tokens` lengths."""
        lengths = list(source_tokens)
        kept = [self.beam] * len(lengths) if widths is None else list(widths)
        return sum(w * self.max_output_length(n) for w, n in zip(kept, lengths, strict=True))

    def replace(self, **changes: object) -> DecodeOptions:
        """A copy with some fields changed, checked like a new value."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def max_output_length(self, source_tokens: int) -> int:
        """The most output tokens for a source of this many tokens (eos counted in neither):
        max_len_a * source_tokens + max_len_b, at most MAX_OUTPUT_TOKENS."""
        return min(int(self.max_len_a * source_tokens + self.max_len_b), MAX_OUTPUT_TOKENS)


OPTION_TYPES: dict[str, type] = typing.get_type_hints(DecodeOptions)  # name -> int, float, bool


def option_names(key: str, value: object = True) -> tuple[str, ...]:
    """The `DecodeOptions` fields whose metadata[key] is `value`, in their order:
    option_names("group", "search"), option_names("native"), option_names("serve")."""
    return tuple(f.name for f in dataclasses.fields(DecodeOptions) if f.metadata[key] == value)


TOKEN_COUNTS = option_names("tokens")  # fields that count output tokens (max_len_b, min_len)


def _check_type(options: DecodeOptions, name: str, kind: type) -> None:
    """A bool field takes True or False; an int field an integer; a float field any real number
    (neither takes a bool)."""
    value = getattr(options, name)
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
        return
    number = numbers.Real if kind is float else numbers.Integral
    if isinstance(value, bool) or not isinstance(value, number):
        expected = "a number" if kind is float else "an integer"
        raise ValueError(f"{name} must be {expected}, got {value!r}")


__all__ = [
    "DEFAULT_MAX_LEN_B",
    "MAX_OUTPUT_TOKENS",
    "OPTION_TYPES",
    "TOKEN_COUNTS",
    "DecodeOptions",
    "option",
    "option_names",
]
