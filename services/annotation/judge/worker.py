"""The AI judge worker: the annotation service's open pair tasks -> an LLM judges each pair -> AI annotations,
through AnnotationService over gRPC as the judge's own service account.

    cheems service judge --base-url http://vllm:8000/v1 --model Qwen2.5-72B-Instruct \
        --annotation-url cheems-annotation:50053 --token-file /var/run/secrets/cheems/account/token

The annotation service opens the pair tasks (its sample intake, for samples whose source matches its
`--ai-sources`); the judge holds no database URL and no Kafka user: a token of a `service` account, which may list
tasks, submit AI annotations of pair tasks and close a pair (`cheems.roles`), nothing else. It looks for open pairs
(`ListTasks` with group_size 2, oldest first, `batch` at a time; a service's listing claims nothing), shuffled so
replicas spread over them, and asks the OpenAI-compatible endpoint about each one still open (its prompt's open
pairs listed again just before) (`judge.judge_pair`: the paper's
template, A/B order drawn per pair, at most `concurrency` calls at once; with `both_orders` a verdict is kept only
when both orders agree, as `cheems annotate judge` does). A verdict is submitted as an AI annotation of its task, so
the prompt's last one resolves it; a pair answered without a usable verdict (unparseable, inconsistent across
orders) is closed without one (`CloseTask`); a pair the endpoint or the service failed on stays open and is asked
again after `retry_every` seconds. A look that finds nothing waits before the next, twice as long each time, up
to `max_idle` seconds.

Idempotent: an annotation's id is derived from prompt, pair and judge model, so a pair judged twice (a restart, two
replicas) is stored once, and a second, different verdict is refused by the service (logged and dropped). Stopping
(`stop`): the calls under way finish, the rest of the look is left open for the next start.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import grpc

from cheems import errors
from services.annotation.judge.client import Gone, PairTask, PairTasks
from services.annotation.judge.pairwise import ChatBackend, JudgeConfig, PairJudgment, judge_pair
from services.channels import open_channel
from services.hosting import GrpcHost, Heartbeat, HostConfig
from services.observe.metrics import ReadAtScrape, new_registry, serve_metrics
from services.store.validate import digest

log = logging.getLogger(__name__)
FIRST_WAIT = 0.5  # seconds after a look that found nothing; doubled up to max_idle


@dataclass(frozen=True)
class JudgeWorkerConfig:
    """model: the judge's name at the endpoint (it keys the annotation ids); judge: retries, both orders,
    concurrency, seed; retry_every: seconds before a pair the endpoint or the service failed on is asked again;
    batch: open pairs listed per look (1..1000); max_idle: the longest wait between looks that find nothing;
    timeout: seconds per call to the annotation service."""

    model: str
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    retry_every: float = 60.0
    batch: int = 100
    max_idle: float = 10.0
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("JudgeWorkerConfig.model: the judge model's name is required")
        if self.retry_every <= 0:
            raise ValueError(f"JudgeWorkerConfig.retry_every must be > 0, got {self.retry_every}")
        if not 1 <= self.batch <= 1000:
            raise ValueError(f"JudgeWorkerConfig.batch must be in 1..1000, got {self.batch}")
        if self.max_idle < FIRST_WAIT:
            raise ValueError(f"JudgeWorkerConfig.max_idle must be >= {FIRST_WAIT}, got {self.max_idle}")
        if self.timeout <= 0:
            raise ValueError(f"JudgeWorkerConfig.timeout must be > 0, got {self.timeout}")


@dataclass(frozen=True)
class ProcessHealth:
    """port: gRPC health port (-1 = none, 0 = any free one); host: its address (0.0.0.0 in a pod);
    stale_after: seconds without a look or a judged pair before health turns NOT_SERVING; metrics_port: HTTP port
    of /metrics, on host (-1 = none, 0 = any free one)."""

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
    unavailable: int = 0  # pairs the endpoint or the annotation service failed on (the task stays open)
    gone: int = 0  # tasks closed meanwhile (another replica)

    def counts(self) -> dict[str, float]:
        return asdict(self)


def annotation_id(prompt_id: str, a: str, b: str, model: str) -> str:
    """The same pair judged by the same model is the same annotation."""
    return "ai-" + digest("judge", prompt_id, sorted((a, b)), model)


class JudgeWorker:
    """`run(stop)` looks for open pairs and judges them until `stop`; `beat` after each look and each pair."""

    def __init__(
        self, tasks: PairTasks, backend: ChatBackend, config: JudgeWorkerConfig, beat: Callable[[], None] = lambda: None
    ) -> None:
        self.tasks, self.backend, self.config, self.beat = tasks, backend, config, beat
        self.stats, self.failed = JudgeStats(), dict[str, float]()  # task id -> when it last failed (monotonic)
        self.rng = random.Random()  # the order of a look: replicas spread over the same list
        self.pool = ThreadPoolExecutor(max(1, config.judge.concurrency), thread_name_prefix="judge")

    def run(self, stop: threading.Event) -> None:
        """Look and judge until `stop`; raises what the service refused (`client.JudgeRefused`): the process stops."""
        wait = FIRST_WAIT
        while not stop.is_set():
            if self.look(stop):
                wait = FIRST_WAIT
            elif not stop.wait(wait):
                wait = min(wait * 2, self.config.max_idle)

    def look(self, stop: threading.Event | None = None) -> int:
        """Judge the open pairs not failed within `retry_every`; how many were judged (0: wait before the next)."""
        now = time.monotonic()
        self.failed = {t: at for t, at in self.failed.items() if now - at < self.config.retry_every}
        try:
            listed = self.tasks.open_pairs(self.config.batch)
        except errors.Unavailable as e:
            log.warning("no open pairs read: %s", e)
            listed = []
        self.beat()
        due = [t for t in listed if t.task_id not in self.failed]
        self.rng.shuffle(due)
        self.judge(due, stop)
        return len(due)

    def judge(self, tasks: list[PairTask], stop: threading.Event | None = None) -> None:
        """Judge pair tasks, `concurrency` at a time, and store each outcome."""
        list(self.pool.map(lambda task: None if stop and stop.is_set() else self.judge_task(task), tasks))

    def judge_task(self, task: PairTask) -> None:
        try:
            self._judge(task)
        except Gone as e:  # closed meanwhile, or another replica's other verdict
            self.stats.gone += 1
            log.info("task %s: %s", task.task_id, e)
        except errors.Unavailable as e:
            self._failed(task, str(e))
        self.beat()

    def _judge(self, task: PairTask) -> None:
        if not self.tasks.is_open(task):
            raise Gone("closed since it was listed: not asked")
        a, b = task.contents
        rng = random.Random(f"{self.config.judge.seed}:{task.prompt_id}:{a}:{b}")
        first, second = (a, b) if rng.random() < 0.5 else (b, a)
        category = task.category[0] if task.category else None
        shown = (first, task.contents[first]), (second, task.contents[second])
        self._store(task, judge_pair(task.prompt, *shown, self.backend, self.config.judge, category))

    def _store(self, task: PairTask, judgment: PairJudgment) -> None:
        relation = judgment.relation()
        if judgment.unavailable:
            self._failed(task, f"the judge failed: {judgment.error}")
        elif relation is None:
            self.tasks.close(task, f"judge {self.config.model}: {judgment.error}")
            self.stats.undecided += 1
        else:
            ident = annotation_id(task.prompt_id, judgment.first, judgment.second, self.config.model)
            self.tasks.submit(task, ident, relation)
            self.stats.submitted += 1

    def _failed(self, task: PairTask, why: str) -> None:
        self.stats.unavailable += 1
        self.failed[task.task_id] = time.monotonic()
        log.warning("task %s stays open, asked again in %.0f s: %s", task.task_id, self.config.retry_every, why)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


HEALTH_NAME = "cheems.annotation.judge"


def serve_judge(
    target: str,
    token: str,
    backend: ChatBackend,
    config: JudgeWorkerConfig,
    health: ProcessHealth | None = None,
    on_ready: Callable[[int], None] | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """`cheems service judge`: the worker against the annotation service at `target` as the account of `token`,
    until SIGTERM/SIGINT; liveness and readiness on gRPC health follow its looks and judged pairs."""
    stop, health = threading.Event(), health or ProcessHealth()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    channel = open_channel(target, credentials, token=token)
    worker = JudgeWorker(PairTasks(channel, config.timeout), backend, config)
    host, registry = None, new_registry()
    registry.register(
        ReadAtScrape("cheems_judge_pairs", "Pairs this judge handled, by outcome (submitted, undecided, unavailable, "
                     "gone)", worker.stats.counts, kind="counter", label="outcome")
    )  # fmt: skip
    exporter = serve_metrics(registry, health.host, health.metrics_port) if health.metrics_port >= 0 else None
    if health.port >= 0:
        listen = HostConfig(port=health.port, host=health.host, workers=2)
        host = GrpcHost(listen, names=[HEALTH_NAME], registry=registry).start()
        heartbeat = Heartbeat(host, health.stale_after)
        heartbeat.beat()
        heartbeat.watch(stop)
        worker.beat = heartbeat.beat
        if on_ready is not None:
            on_ready(host.port)
    log.info("judge %s on the open pairs of %s", config.model, target)
    try:
        worker.run(stop)
    finally:
        stop.set()
        worker.close()
        channel.close()
        if host is not None:
            host.stop(0)
        if exporter is not None:
            exporter.close()
