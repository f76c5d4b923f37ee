"""The limits of one request: `qkv serve`'s options read their defaults here, without the
HTTP stack."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, and how long it may take."""

    max_body_bytes: int = 1 << 20  # request body (413)
    max_chars: int = 10_000  # characters of text in one request (413)
    max_sentences: int = 128  # sentences (lines) in one request (413)
    max_beam: int = 16  # beam and n-best (400)
    # max_len_b and min_len of a request, and its output length limits beyond each sentence's
    # source length (max_len_a * source tokens + max_len_b - source tokens) (400)
    max_output_tokens: int = 512
    # beam * output length limit (max_len_a * source tokens + max_len_b), summed over the
    # sentences: the most decoding a request may ask for (413)
    max_decode_tokens: int = 131_072
    # requests that may decode more than this many tokens (as above) are decoded by a second
    # thread, so that short requests never wait behind them
    long_request_tokens: int = 4096
    timeout: float = 60.0  # seconds from arrival to answer (504)
    max_queue: int = 256  # requests waiting for the decoder (503 beyond)
