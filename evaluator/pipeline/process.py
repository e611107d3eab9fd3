"""Running a score worker or the result sink as a long-lived process, until SIGTERM or SIGINT.

    cheems service eval-worker --bootstrap HOST:9092 --scorer-url HOST:50051 [--health-port 50054] [--model-wait 120]
                               [--batch-size 256]
    cheems service eval-sink --bootstrap HOST:9092 --db URL [--health-port 50055] [--batch-size 512]

With a health port, gRPC health (`cheems.evaluator.worker` / `cheems.evaluator.sink`, readiness and
liveness) follows a heartbeat of the consumer loop: a loop that stops polling for `stale_after`
seconds turns NOT_SERVING and Kubernetes restarts the pod. On a signal the consumer leaves its
group at once, so its partitions move to the other members without waiting for a session timeout;
a worker waiting for the scorer to serve a run's model stops waiting, leaving that request to be
redelivered.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from evaluator.errors import WorkerStopped
from evaluator.pipeline.sink import SINK_GROUP, ResultSink, SinkConfig
from evaluator.pipeline.worker import WORKER_GROUP, ScoreWorker, WorkerConfig
from services.bus.client import EventConsumer
from services.bus.metrics import watch_consumers
from services.hosting import GrpcHost, Heartbeat, HostConfig
from services.observe.metrics import ReadAtScrape, new_registry, serve_metrics
from services.store.db import StoreConfig, create_engine_for

log = logging.getLogger(__name__)
OnReady = Callable[[int], None]  # called with the bound health port once it serves


@dataclass(frozen=True)
class ProcessConfig:
    """health_port: gRPC health port (-1 = none, 0 = any free port); health_host: its address
    (0.0.0.0 in a pod); stale_after: seconds without a poll before health turns NOT_SERVING; metrics_port: HTTP
    port of Prometheus' /metrics on health_host (-1 = none, 0 = any free port)."""

    health_port: int = -1
    health_host: str = "127.0.0.1"
    stale_after: float = 600.0
    metrics_port: int = -1

    def __post_init__(self) -> None:
        if not -1 <= self.health_port <= 65535:
            raise ValueError(f"health_port must be -1 (none) or in 0..65535, got {self.health_port}")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be -1 (none) or in 0..65535, got {self.metrics_port}")
        if self.stale_after <= 0:
            raise ValueError(f"stale_after must be > 0, got {self.stale_after}")


class Consuming(Protocol):
    consumer: EventConsumer

    def close(self) -> None: ...


def run_until_signal(
    role: str,
    make: Callable[[threading.Event], Consuming],
    config: ProcessConfig,
    on_ready: OnReady | None = None,
    measure: Callable[[Any], Collector] | None = None,
) -> None:
    """Build the consumer with `make(stop)`, poll it until SIGTERM/SIGINT sets `stop`, then close it and the
    health host. `/metrics` (config.metrics_port): the process's, the consumer's lag and dead letters, and what
    `measure(consumer)` reads from it."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    consuming = make(stop)
    registry = new_registry()
    watch_consumers(registry)
    if measure is not None:
        registry.register(measure(consuming))
    port = config.metrics_port
    exporter = serve_metrics(registry, config.health_host, port) if port >= 0 else None
    host, on_poll = _health(role, config, stop, registry) if config.health_port >= 0 else (None, None)
    if host is not None and on_ready is not None:
        on_ready(host.port)
    try:
        consuming.consumer.run(stop, on_poll)
    except WorkerStopped as e:  # the request it was handling is not committed: another worker gets it
        log.info("%s: %s", role, e)
    finally:
        consuming.close()  # leaves the group at once, so the partitions move without a session timeout
        if host is not None:
            host.stop(0)
        if exporter is not None:
            exporter.close()
    log.info("%s stopped", role)


def _health(
    role: str, config: ProcessConfig, stop: threading.Event, registry: CollectorRegistry
) -> tuple[GrpcHost, Callable[[], None]]:
    """A health-only gRPC host, SERVING while the heartbeat is fresh; returns it and the beat to call per poll."""
    host_config = HostConfig(port=config.health_port, host=config.health_host, workers=2)
    host = GrpcHost(host_config, names=[f"cheems.evaluator.{role}"], registry=registry).start()
    heartbeat = Heartbeat(host, config.stale_after)
    heartbeat.beat()
    heartbeat.watch(stop)
    log.info("%s: health on %s:%d", role, config.health_host, host.port)
    return host, heartbeat.beat


def serve_worker(
    bootstrap: str,
    scorer_url: str,
    token: str = "",
    config: ProcessConfig | None = None,
    on_ready: OnReady | None = None,
    group: str = "",
    worker: WorkerConfig | None = None,
) -> None:
    """A score worker (`cheems service eval-worker`) until a signal; `group` defaults to the shared one."""

    def make(stop: threading.Event) -> ScoreWorker:
        return ScoreWorker(bootstrap, scorer_url, token, group or WORKER_GROUP, worker, stop)

    run_until_signal("worker", make, config or ProcessConfig(), on_ready)


def serve_sink(
    bootstrap: str,
    db: str,
    config: ProcessConfig | None = None,
    on_ready: OnReady | None = None,
    sink: SinkConfig | None = None,
    group: str = "",
) -> None:
    """The result sink (`cheems service eval-sink`) until a signal; `group` defaults to the shared one."""

    def make(stop: threading.Event) -> ResultSink:
        return ResultSink(bootstrap, create_engine_for(StoreConfig(db)), sink, group or SINK_GROUP)

    run_until_signal("sink", make, config or ProcessConfig(), on_ready, items_scored)


def items_scored(sink: ResultSink) -> Collector:
    """`cheems_eval_items_scored_total`: the bench items whose scores this sink stored."""
    return ReadAtScrape(
        "cheems_eval_items_scored", "Evaluation items whose scores this sink stored", lambda: sink.stats.stored,
        kind="counter",
    )  # fmt: skip
