"""Prometheus metrics of the scorer, in a registry of its own (tests run several servers in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ScorerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("cheems_scorer_requests", "Score calls", ["api", "status"], registry=self.registry)
        self.responses = Counter("cheems_scorer_responses", "Responses scored", registry=self.registry)
        self.latency = Histogram(
            "cheems_scorer_latency_seconds",
            "Time per call",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "cheems_scorer_batch_responses",
            "Responses per backend call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.queue = Histogram(
            "cheems_scorer_queue_seconds",
            "Time before inference started",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
