"""DecodeOptions: one frozen value for the decoding options, checked when it is made."""

from __future__ import annotations

import dataclasses
import math

import pytest

from qkv.decode.options import MAX_OUTPUT_TOKENS, DecodeOptions
from qkv.decode.search import DEFAULT_MAX_LEN_B


def test_defaults() -> None:
    options = DecodeOptions()
    assert (options.beam, options.alpha, options.nbest) == (4, 0.6, 1)
    assert (options.max_len_a, options.max_len_b, options.min_len) == (1.0, DEFAULT_MAX_LEN_B, 0)
    assert not options.sampling
    assert (options.temperature, options.top_k, options.top_p, options.seed) == (1.0, 0, 1.0, 0)


def test_frozen_and_replace_checks_again() -> None:
    options = DecodeOptions(beam=5, nbest=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.beam = 2  # type: ignore[misc]
    assert options.replace(alpha=1.0) == DecodeOptions(beam=5, nbest=5, alpha=1.0)
    with pytest.raises(ValueError, match="nbest"):
        options.replace(beam=2)  # nbest 5 > beam 2


def test_max_output_length() -> None:
    assert DecodeOptions().max_output_length(10) == 10 + DEFAULT_MAX_LEN_B
    assert DecodeOptions(max_len_a=0.5, max_len_b=7).max_output_length(9) == int(0.5 * 9 + 7)
    assert DecodeOptions(max_len_a=0.0, max_len_b=0).max_output_length(30) == 0
    # no length limit asks for more than MAX_OUTPUT_TOKENS (no cache of 10**9 rows)
    assert DecodeOptions(max_len_a=1e6, max_len_b=MAX_OUTPUT_TOKENS).max_output_length(10**6) == MAX_OUTPUT_TOKENS


@pytest.mark.parametrize("field, value", [
    ("beam", 0), ("beam", -3),
    ("nbest", 0), ("nbest", 5),  # beam 4
    ("alpha", math.nan), ("alpha", math.inf), ("alpha", -math.inf),
    ("max_len_a", -0.5), ("max_len_a", math.inf), ("max_len_a", math.nan),
    ("max_len_b", -1), ("min_len", -1),
    ("max_len_b", MAX_OUTPUT_TOKENS + 1), ("max_len_b", 10**20), ("min_len", MAX_OUTPUT_TOKENS + 1),
    ("temperature", 0.0), ("temperature", -1.0), ("temperature", math.nan), ("temperature", math.inf),
    ("top_k", -1),
    ("top_p", 0.0), ("top_p", 1.5), ("top_p", -0.1), ("top_p", math.nan),
    ("seed", -1), ("seed", 2**63),
    # the wrong kind of value
    ("beam", 2.0), ("beam", True), ("beam", "4"), ("nbest", None), ("max_len_b", 5.5), ("min_len", 1.0),
    ("top_k", 3.0), ("seed", "1"), ("alpha", "0.6"), ("temperature", None), ("top_p", True),
    ("sampling", 1), ("sampling", "yes"),
])
def test_each_bad_value_is_a_value_error_naming_its_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        DecodeOptions(**{field: value})


def test_nbest_with_sampling_is_one() -> None:
    with pytest.raises(ValueError, match=r"^nbest=2: sampling draws one hypothesis"):
        DecodeOptions(sampling=True, nbest=2)
    with pytest.raises(ValueError, match=r"^nbest=2 must be between 1 and the beam size \(beam=1\)"):
        DecodeOptions(beam=1, nbest=2)
    assert DecodeOptions(sampling=True, beam=1).nbest == 1


def test_good_edge_values_are_accepted() -> None:
    DecodeOptions(beam=1, nbest=1, alpha=0, max_len_a=0, max_len_b=0, min_len=0)
    DecodeOptions(beam=3, nbest=3, alpha=-1.0)  # a negative alpha favours short outputs
    DecodeOptions(sampling=True, temperature=1e-3, top_k=0, top_p=1.0, seed=2**63 - 1)
    DecodeOptions(sampling=True, temperature=5, top_k=1, top_p=1e-6)
    DecodeOptions(max_len_a=2, alpha=1)  # ints where floats go
    DecodeOptions(max_len_b=MAX_OUTPUT_TOKENS, min_len=MAX_OUTPUT_TOKENS)


def test_beam_zero_is_blamed_on_the_beam() -> None:
    """`--beam 0` is blamed on the beam, not on nbest."""
    with pytest.raises(ValueError, match=r"^beam must be >= 1") as error:
        DecodeOptions(beam=0)
    assert "nbest" not in str(error.value)
