"""The server's Prometheus metrics (`GET /metrics`), in a registry of their own per application.

    qkv_requests_total{endpoint, status}    HTTP requests answered
    qkv_request_seconds{endpoint}           latency histogram, arrival to answer
    qkv_requests_in_flight                  requests being handled now
    qkv_queue_depth                         requests waiting for the decoder
    qkv_sentences_total{pair}               sentences translated
    qkv_source_tokens_total{pair}           their subword tokens (eos included)
    qkv_target_tokens_total{pair}           the tokens written (eos included)
    qkv_sentence_steps_total{pair}          decoding steps, each sentence counted at each of its
                                            steps (a sentence dropped stops adding to it)
    qkv_batch_sentences                     sentences per decoded batch (how much batching helps)
    qkv_batch_seconds                       decoding time per batch
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .batcher import BatchStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "qkv_requests", "HTTP requests answered", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "qkv_request_seconds",
            "Seconds from a request's arrival to its answer",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("qkv_requests_in_flight", "Requests being handled", registry=r)
        self.queue_depth = Gauge(
            "qkv_queue_depth", "Requests waiting for the decoder", registry=r
        )
        self.sentences = Counter("qkv_sentences", "Sentences translated", ["pair"], registry=r)
        self.source_tokens = Counter(
            "qkv_source_tokens", "Source subword tokens translated", ["pair"], registry=r
        )
        self.target_tokens = Counter(
            "qkv_target_tokens", "Target subword tokens written", ["pair"], registry=r
        )
        self.sentence_steps = Counter(
            "qkv_sentence_steps", "Decoding steps, per sentence decoded", ["pair"], registry=r
        )
        self.batch_sentences = Histogram(
            "qkv_batch_sentences", "Sentences per decoded batch", buckets=BATCH_BUCKETS, registry=r
        )
        self.batch_seconds = Histogram(
            "qkv_batch_seconds", "Seconds to decode one batch", buckets=LATENCY_BUCKETS, registry=r
        )

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_batch(self, stats: BatchStats) -> None:
        """Called by the decoding thread after each batch (prometheus_client is thread-safe)."""
        self.sentences.labels(stats.pair).inc(stats.sentences)
        self.source_tokens.labels(stats.pair).inc(stats.source_tokens)
        self.target_tokens.labels(stats.pair).inc(stats.target_tokens)
        self.sentence_steps.labels(stats.pair).inc(stats.steps)
        self.batch_sentences.observe(stats.sentences)
        self.batch_seconds.observe(stats.seconds)


__all__ = ["Metrics"]
