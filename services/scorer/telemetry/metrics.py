"""The scorer's Prometheus metrics, in a registry of its own (tests run several servers in one process).

Every series that concerns a model carries its `model_id` ("" where no model was reached: a refused token, a
malformed request). Per call (the transports): `cheems_scorer_requests_total{api,status,model_id}` and
`cheems_scorer_latency_seconds{api,model_id}`. Per call to a model (the scoring service, after TEI):
`cheems_scorer_request_duration_seconds{model_id,phase}`, phase `tokenize`, `queue` (torch backend only: Triton's
and vLLM's queues are in their own metrics, re-exported), `inference` and `total`; `cheems_scorer_responses_total`,
`cheems_scorer_batch_responses` (responses per call), `cheems_scorer_prompt_tokens_total` (tokens of the
sequences scored, template and prompt included) and `cheems_scorer_truncations_total` (sequences cut to
max_length). Per forward of the torch backend's batcher: `cheems_scorer_forward_calls`,
`cheems_scorer_forward_sequences`, and how well a batch is used: `cheems_scorer_forward_tokens_total` (what the
model computed, padding included), `cheems_scorer_padding_tokens_total`, `cheems_scorer_prefix_shared_tokens_total`
(tokens of a shared prompt computed once instead of again), so that forward = prompt - prefix-shared + padding.
With --follow: `cheems_scorer_follow_events_total{result}`, the models topic's events by what came of them
(applied, ignored, refused: a claim the registry does not back, unverified: the registry away).

At each scrape, for the models loaded now: `cheems_scorer_model_info{model_id,backend,dtype,default}` (1, as
Prometheus' `*_info` metrics), `cheems_scorer_in_flight{model_id}` (calls using it), and
`cheems_scorer_model_load_seconds{model_id}` (how long loading it took); the reward watch (`reward_watch`); the
engines' own metrics (`backends`). With `enabled=False` (`cheems serve --no-metrics`) nothing is counted and
/metrics is not served: what the benchmark compares the cost of metrics with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.scorer.telemetry.backends import BackendExport, Source
from services.scorer.telemetry.bench import BenchLookup
from services.scorer.telemetry.phases import CallClock
from services.scorer.telemetry.reward_watch import WINDOW, RewardWatch

if TYPE_CHECKING:
    from cheems.forward import ForwardTokens  # (the torch stack: not loaded to count)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Loaded:
    """A model loaded now, as the scrape-time metrics see it."""

    model_id: str
    backend: str
    dtype: str
    default: bool
    in_flight: int
    load_seconds: float


@dataclass(frozen=True)
class Scored:
    """What one call to one model did: its clock, its sequences' token counts, how many were cut, its rewards and
    the lengths (characters) of the responses they reward."""

    clock: CallClock
    tokens: Sequence[int]
    truncated: int
    rewards: Sequence[float]
    lengths: Sequence[int]


class _Series:
    """The children of one model's per-call series, looked up once (`labels` takes a lock and a dict lookup)."""

    def __init__(self, m: ScorerMetrics, model_id: str) -> None:
        self.phases = {p: m.duration.labels(model_id, p) for p in ("tokenize", "queue", "inference", "total")}
        self.responses, self.batch = m.responses.labels(model_id), m.batch_size.labels(model_id)
        self.prompt_tokens, self.truncations = m.prompt_tokens.labels(model_id), m.truncations.labels(model_id)
        self.forward_calls, self.forward_sequences = (
            m.forward_calls.labels(model_id),
            m.forward_sequences.labels(model_id),
        )
        self.forward_tokens, self.padding = m.forward_tokens.labels(model_id), m.padding_tokens.labels(model_id)
        self.shared = m.shared_tokens.labels(model_id)


class ScorerMetrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, enabled: bool = True, reward_window: int = WINDOW
    ) -> None:
        """`registry`: where the metrics are served from (a new one if None); `enabled=False`: counted nowhere."""
        self.enabled = enabled
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self._own = self.registry if enabled else CollectorRegistry()  # off: a registry nobody serves
        model = ["model_id"]
        self._series: dict[str, _Series] = {}
        self.requests = Counter("cheems_scorer_requests", "Calls", ["api", "status", "model_id"], registry=r)
        self.latency = _histogram(r, "cheems_scorer_latency_seconds", "Time per call", ["api", "model_id"])
        self.duration = _histogram(
            r,
            "cheems_scorer_request_duration_seconds",
            "Time of one call to a model, by phase: tokenize, queue (torch backend), inference, total",
            ["model_id", "phase"],
        )
        self.responses = Counter("cheems_scorer_responses", "Responses scored", model, registry=r)
        self.batch_size = _histogram(r, "cheems_scorer_batch_responses", "Responses per call", model, SIZE_BUCKETS)
        self.prompt_tokens = Counter(
            "cheems_scorer_prompt_tokens", "Tokens of the sequences scored (template and prompt included)", model,
            registry=r,
        )  # fmt: skip
        self.truncations = Counter("cheems_scorer_truncations", "Sequences cut to max_length", model, registry=r)
        self.forward_calls = _histogram(
            r, "cheems_scorer_forward_calls", "Calls sharing one forward (torch backend)", model, SIZE_BUCKETS
        )
        self.forward_sequences = _histogram(
            r, "cheems_scorer_forward_sequences", "Sequences in one forward (torch backend)", model, SIZE_BUCKETS
        )
        self.forward_tokens = Counter(
            "cheems_scorer_forward_tokens", "Tokens the forwards computed, padding included (torch backend)", model,
            registry=r,
        )  # fmt: skip
        self.padding_tokens = Counter(
            "cheems_scorer_padding_tokens", "Padding in the forwards (torch backend)", model, registry=r
        )
        self.shared_tokens = Counter(
            "cheems_scorer_prefix_shared_tokens",
            "Tokens of a common prefix computed once instead of again (torch backend, prefix sharing)",
            model,
            registry=r,
        )
        self.backend_errors = Counter(
            "cheems_scorer_backend_metrics_errors",
            "Scrapes of an engine's metrics that failed",
            ["backend"],
            registry=r,
        )
        self.follow_events = Counter(
            "cheems_scorer_follow_events",
            "ModelEvents --follow read, by what came of them: applied (the registry confirmed it is production), "
            "ignored (no step to production), refused (the registry does not hold what the event says), unverified "
            "(the registry could not be read)",
            ["result"],
            registry=r,
        )
        self.watch = RewardWatch(r, reward_window)

    def _of(self, model_id: str) -> _Series:
        found = self._series.get(model_id)
        if found is None:  # a benign race: two threads may build it, one wins, both children are the same
            found = self._series[model_id] = _Series(self, model_id)
        return found

    # --- on the path of a call (nothing when disabled)

    def count(self, api: str, status: str, model_id: str = "", seconds: float | None = None) -> None:
        """One call ended with `status` (a gRPC code name); `seconds`, its time, for one that succeeded."""
        if not self.enabled:
            return
        self.requests.labels(api, status, model_id).inc()
        if seconds is not None:
            self.latency.labels(api, model_id).observe(seconds)

    def observe_scored(self, model_id: str, scored: Scored) -> None:
        """A call to `model_id` returned its rewards."""
        if not self.enabled:
            return
        series = self._of(model_id)
        for phase, seconds in scored.clock.phases().items():
            series.phases[phase].observe(seconds)
        series.responses.inc(len(scored.rewards))
        series.batch.observe(len(scored.rewards))
        series.prompt_tokens.inc(sum(scored.tokens))
        if scored.truncated:
            series.truncations.inc(scored.truncated)
        self.watch.observe(model_id, scored.rewards, scored.lengths)

    def observe_batch(self, model_id: str, calls: int, sequences: int) -> None:
        """The torch batcher ran one batch of `calls` calls, `sequences` sequences in all."""
        if self.enabled:
            series = self._of(model_id)
            series.forward_calls.observe(calls)
            series.forward_sequences.observe(sequences)

    def observe_tokens(self, model_id: str, tokens: ForwardTokens) -> None:
        """One forward of the torch backend: what it computed, of which padding, and the prefix it shared."""
        if self.enabled:
            series = self._of(model_id)
            series.forward_tokens.inc(tokens.computed)
            series.padding.inc(tokens.padding)
            series.shared.inc(tokens.shared)

    def count_follow_event(self, result: str) -> None:
        """--follow read a ModelEvent: `result` is what came of it (`models.follow.Follower.on_event`)."""
        if self.enabled:
            self.follow_events.labels(result).inc()

    # --- read at each scrape

    def watch_models(self, loaded: Callable[[], Iterable[Loaded]]) -> None:
        """The models `loaded()` names at each scrape: info, in flight, load time, and the reward watch's models."""
        if self.enabled:
            self._own.register(_Loaded(loaded))
        self.watch.models = lambda: [m.model_id for m in loaded()]

    def watch_backends(self, sources: Callable[[], Iterable[Source]]) -> None:
        """Re-export the engines `sources()` names at each scrape (`backends.BackendExport`)."""
        if self.enabled:
            self._own.register(BackendExport(sources, self.backend_errors))

    def use_bench(self, bench: BenchLookup) -> None:
        """Where the reward watch finds each model's bench rewards (`bench.BenchCache`)."""
        self.watch.bench = bench

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _histogram(
    registry: CollectorRegistry, name: str, text: str, labels: list[str], buckets: Sequence[float] = LATENCY_BUCKETS
) -> Histogram:
    return Histogram(name, text, labels, buckets=buckets, registry=registry)


class _Loaded(Collector):
    def __init__(self, loaded: Callable[[], Iterable[Loaded]]) -> None:
        self.loaded = loaded

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def _families(self) -> list[GaugeMetricFamily]:
        info = GaugeMetricFamily(
            "cheems_scorer_model_info",
            "A model loaded now (value 1): its id, backend, the dtype it computes in, and whether calls get it",
            labels=["model_id", "backend", "dtype", "default"],
        )
        in_flight = GaugeMetricFamily("cheems_scorer_in_flight", "Calls using the model now", labels=["model_id"])
        load = GaugeMetricFamily(
            "cheems_scorer_model_load_seconds", "Seconds loading the model took", labels=["model_id"]
        )
        return [info, in_flight, load]

    def collect(self) -> Iterator[Metric]:
        info, in_flight, load = families = self._families()
        for m in self.loaded():
            info.add_metric([m.model_id, m.backend, m.dtype, "true" if m.default else "false"], 1)
            in_flight.add_metric([m.model_id], m.in_flight)
            load.add_metric([m.model_id], m.load_seconds)
        yield from families
