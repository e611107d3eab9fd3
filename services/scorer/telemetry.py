"""Prometheus metrics of the scorer, in a registry of its own (tests run several servers in one process).

Besides the counters and histograms of calls, `cheems_scorer_model_info` has one sample (value 1) per model
loaded now, labelled with its id, backend, dtype and whether it is the default, as Prometheus' `*_info`
metrics are; `cheems_scorer_forward_calls` and `..._forward_sequences` show how many calls and sequences
the torch batcher put in each forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# (model id, backend, dtype, is the default) of each model loaded now
ModelLabels = tuple[str, str, str, bool]


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
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )
        self.queue = Histogram(
            "cheems_scorer_queue_seconds",
            "Time before inference started",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.forward_calls = Histogram(
            "cheems_scorer_forward_calls",
            "Calls sharing one forward (torch backend's batcher)",
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )
        self.forward_sequences = Histogram(
            "cheems_scorer_forward_sequences",
            "Sequences in one forward (torch backend's batcher)",
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )

    def observe_forward(self, calls: int, sequences: int) -> None:
        self.forward_calls.observe(calls)
        self.forward_sequences.observe(sequences)

    def watch_models(self, loaded: Callable[[], Iterable[ModelLabels]]) -> None:
        """Report the models `loaded()` names at each scrape (`cheems_scorer_model_info`)."""
        self.registry.register(_ModelInfo(loaded))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ModelInfo(Collector):
    def __init__(self, loaded: Callable[[], Iterable[ModelLabels]]) -> None:
        self.loaded = loaded

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cheems_scorer_model_info",
            "A model loaded now (value 1): its id, backend, the dtype it computes in, and whether calls get it",
            labels=["model_id", "backend", "dtype", "default"],
        )
        for model_id, backend, dtype, default in self.loaded():
            family.add_metric([model_id, backend, dtype, "true" if default else "false"], 1)
        yield family
