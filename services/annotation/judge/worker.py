"""The AI judge worker: cheems.samples.v1 -> pair tasks -> an LLM judges each pair -> AI annotations.

    cheems service judge --base-url http://vllm:8000/v1 --model Qwen2.5-72B-Instruct --db URL --bootstrap HOST:9092

Consumer group "cheems-judge". For each sample whose source matches `ai_sources` it opens the prompt's
pair tasks (group_size 2) and commits; a judging thread then asks the OpenAI-compatible endpoint about
each open pair (`judge.judge_pair`: the paper's template, A/B order drawn per pair, at most
`concurrency` calls at once; with `both_orders` a verdict is kept only when both orders agree, as
`cheems annotate judge` does) and submits the verdict through `AnnotationService` as an AI annotation
on its task, so the prompt's last verdict resolves it and announces its ranking. A pair answered
without a usable verdict (unparseable, inconsistent across orders) closes its task without an
annotation; a pair the endpoint failed on stays open and is asked again after `retry_every` seconds.

Idempotent: an annotation's id is derived from prompt, pair and judge model, so a redelivered sample
judges only what is still open, and a verdict submitted twice is stored once. Open pair tasks older
than `retry_every` (left by a crash, or by an endpoint outage) are swept up at start and then every
`retry_every` seconds; with several replicas a leftover may be judged twice, and the second verdict
is a no-op (or, if it differs, logged and dropped).
"""

from __future__ import annotations

import logging
import queue
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kafka.errors import KafkaError

from cheems import errors
from cheems.credentials import hide_password
from services.annotation.events import BrokerUnavailable
from services.annotation.intake import matches, take_sample
from services.annotation.judge.pairwise import ChatBackend, JudgeConfig, PairJudgment, judge_pair
from services.annotation.metrics import annotations_counter
from services.annotation.service import MAX_LISTED, AnnotationService, OpenTask
from services.bus import topics
from services.bus.client import EventConsumer, Publisher
from services.bus.metrics import watch_consumers
from services.bus.relay import RelayConfig
from services.hosting import GrpcHost, Heartbeat, HostConfig
from services.observe.metrics import new_registry, serve_metrics
from services.store.models import utcnow
from services.store.validate import digest

log = logging.getLogger(__name__)
JUDGE_GROUP = "cheems-judge"


@dataclass(frozen=True)
class JudgeWorkerConfig:
    """model: the judge's name at the endpoint (it names the annotator and keys the annotation ids);
    ai_sources: fnmatch patterns of `Sample.source` the judge annotates; judge: retries, both orders,
    concurrency, seed; retry_every: seconds before an open pair task is asked again (and between sweeps)."""

    model: str
    ai_sources: tuple[str, ...] = ("*",)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    retry_every: float = 60.0
    group: str = JUDGE_GROUP

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("JudgeWorkerConfig.model: the judge model's name is required")
        if not self.ai_sources or not all(p.strip() for p in self.ai_sources):
            raise ValueError(f"JudgeWorkerConfig.ai_sources: expected non-empty patterns, got {self.ai_sources!r}")
        if self.retry_every <= 0:
            raise ValueError(f"JudgeWorkerConfig.retry_every must be > 0, got {self.retry_every}")


@dataclass(frozen=True)
class ProcessHealth:
    """port: gRPC health port (-1 = none, 0 = any free one); host: its address (0.0.0.0 in a pod);
    stale_after: seconds without a poll before health turns NOT_SERVING; metrics_port: HTTP port of /metrics, on
    host (-1 = none, 0 = any free one)."""

    port: int = -1
    host: str = "127.0.0.1"
    stale_after: float = 600.0
    metrics_port: int = -1

    def __post_init__(self) -> None:
        if not -1 <= self.port <= 65535:
            raise ValueError(f"ProcessHealth.port must be -1 (none) or in 0..65535, got {self.port}")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"ProcessHealth.metrics_port must be -1 (none) or in 0..65535, got {self.metrics_port}")
        if self.stale_after <= 0:
            raise ValueError(f"ProcessHealth.stale_after must be > 0, got {self.stale_after}")


@dataclass
class JudgeStats:
    submitted: int = 0  # verdicts stored (or already stored)
    undecided: int = 0  # tasks closed without a verdict
    unavailable: int = 0  # asks the endpoint failed (the task stays open)


def annotation_id(prompt_id: str, a: str, b: str, model: str) -> str:
    """The same pair judged by the same model is the same annotation."""
    return "ai-" + digest("judge", prompt_id, sorted((a, b)), model)


class JudgeWorker:
    """`handle` opens pair tasks (the consumer's thread); `run_judging` judges them (its own thread)."""

    def __init__(
        self, bootstrap: str, service: AnnotationService, backend: ChatBackend, config: JudgeWorkerConfig
    ) -> None:
        self.service, self.backend, self.config = service, backend, config
        self.stats = JudgeStats()
        self.prompts: queue.Queue[str] = queue.Queue()
        self.pool = ThreadPoolExecutor(max(1, config.judge.concurrency), thread_name_prefix="judge")
        self.consumer = EventConsumer(bootstrap, [topics.SAMPLES], config.group, self.handle)

    def handle(self, topic: str, key: str, event: Any) -> None:
        if matches(event.sample.source, self.config.ai_sources):
            prompt_id = take_sample(self.service, event.sample, 2)
            if prompt_id is not None:
                self.prompts.put(prompt_id)

    def run_judging(self, stop: threading.Event) -> None:
        """Judge queued prompts as they come, and sweep up old open pair tasks every `retry_every` seconds."""
        next_sweep = 0.0  # at once: what a previous process left
        while not stop.is_set():
            if time.monotonic() >= next_sweep:
                self.judge(self.service.open_tasks(None, 2, MAX_LISTED, utcnow() - self._retry_age()), stop)
                next_sweep = time.monotonic() + self.config.retry_every
            try:
                prompt_ids = {self.prompts.get(timeout=min(1.0, self.config.retry_every))}
            except queue.Empty:
                continue
            while not self.prompts.empty():
                prompt_ids.add(self.prompts.get_nowait())
            self.judge([t for p in sorted(prompt_ids) for t in self.service.open_tasks(p, 2, MAX_LISTED)], stop)

    def judge(self, tasks: list[OpenTask], stop: threading.Event | None = None) -> None:
        """Judge open pair tasks, `concurrency` at a time, and store each outcome."""
        list(self.pool.map(lambda task: None if stop and stop.is_set() else self.judge_task(task), tasks))

    def judge_task(self, task: OpenTask) -> None:
        a, b = task.contents
        rng = random.Random(f"{self.config.judge.seed}:{task.prompt_id}:{a}:{b}")
        first, second = (a, b) if rng.random() < 0.5 else (b, a)
        category = task.category[0] if task.category else None
        shown = (first, task.contents[first]), (second, task.contents[second])
        judgment = judge_pair(task.prompt, *shown, self.backend, self.config.judge, category)
        try:
            self._store(task, judgment)
        except (errors.Conflict, errors.InvalidInput) as e:  # closed meanwhile, or another replica's other verdict
            log.warning("task %s: verdict not stored: %s", task.task_id, e)

    def _store(self, task: OpenTask, judgment: PairJudgment) -> None:
        relation = judgment.relation()
        if judgment.unavailable:
            self.stats.unavailable += 1
            log.warning("task %s stays open, the judge failed: %s", task.task_id, judgment.error)
        elif relation is None:
            self.stats.undecided += 1
            self.service.close_task(task.task_id, f"judge {self.config.model}: {judgment.error}")
        else:
            result = (
                {"equal": [relation.better, relation.worse]}
                if relation.tie
                else {"better": relation.better, "worse": relation.worse}
            )
            ident = annotation_id(task.prompt_id, judgment.first, judgment.second, self.config.model)
            annotator = f"judge:{self.config.model}"[:128]
            self.service.submit(ident, task.prompt_id, annotator, "ai", result, [], task.task_id)
            self.stats.submitted += 1

    def _retry_age(self) -> timedelta:
        return timedelta(seconds=self.config.retry_every)

    def close(self) -> None:
        self.consumer.close()
        self.pool.shutdown(wait=True, cancel_futures=True)


def run_worker(worker: JudgeWorker, stop: threading.Event, on_poll: Callable[[], None] | None = None) -> None:
    """Poll samples in this thread and judge in another until `stop`; a judging thread that dies stops both
    (and raises here), so the process exits to be restarted."""
    failure: list[BaseException] = []

    def judging() -> None:
        try:
            worker.run_judging(stop)
        except BaseException as e:
            log.exception("judging stopped")
            failure.append(e)
            stop.set()

    thread = threading.Thread(target=judging, name="judging", daemon=True)
    thread.start()
    try:
        worker.consumer.run(stop, on_poll)
    finally:
        stop.set()
        thread.join(30)
    if failure:
        raise failure[0]


HEALTH_NAME = "cheems.annotation.judge"


def serve_judge(
    db: str,
    bootstrap: str,
    backend: ChatBackend,
    config: JudgeWorkerConfig,
    health: ProcessHealth | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """`cheems service judge`: the worker until SIGTERM/SIGINT, its liveness and readiness on gRPC health
    following the consumer loop's heartbeat. Expects a migrated database (`cheems db upgrade`)."""
    from services.store.db import StoreConfig, create_engine_for

    stop, health = threading.Event(), health or ProcessHealth()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    engine, relay = create_engine_for(StoreConfig(db)), RelayConfig()
    try:
        publisher = Publisher(bootstrap, max_block_ms=int(relay.ack_timeout * 1000))
        service = AnnotationService(engine, publisher, relay)
        worker = JudgeWorker(bootstrap, service, backend, config)
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach the broker at {hide_password(bootstrap)}: {e!r}") from None
    host, beat, registry = None, None, new_registry()
    registry.register(annotations_counter(service))
    watch_consumers(registry)
    exporter = serve_metrics(registry, health.host, health.metrics_port) if health.metrics_port >= 0 else None
    if health.port >= 0:
        listen = HostConfig(port=health.port, host=health.host, workers=2)
        host = GrpcHost(listen, names=[HEALTH_NAME], registry=registry).start()
        heartbeat = Heartbeat(host, health.stale_after)
        heartbeat.beat()
        heartbeat.watch(stop)
        beat = heartbeat.beat
        if on_ready is not None:
            on_ready(host.port)
    log.info("judge %s on samples from %s", config.model, ", ".join(config.ai_sources))
    try:
        run_worker(worker, stop, beat)
    finally:
        worker.close()
        service.close()
        publisher.close(timeout=10)  # a broker that is down must not hold up the exit
        if host is not None:
            host.stop(0)
        if exporter is not None:
            exporter.close()
