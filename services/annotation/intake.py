"""Sample intake: cheems.samples.v1 -> triple-wise tasks for people and pair tasks for the AI judge, for each prompt
whose source matches (`human_sources`, `ai_sources`).

Runs in `cheems service annotation --bootstrap HOST:9092` beside the gRPC server, in a thread whose
heartbeat drives the process's liveness. Consumer group "cheems-annotation": offsets are committed
after the tasks are stored, and opening a prompt's tasks again changes nothing, so a redelivered
sample (a restart, a rebalance) is harmless. A prompt the store does not hold yet is stored from
the event (its id is its content hash: the prompt ingestion stored elsewhere). A sample the store
refuses (no prompt text, a response key reused with other content) is logged and skipped; a store
that cannot be reached stops the loop, and the process exits to be restarted.

The judge (`judge.worker`) finds the pair tasks through the service's ListTasks, as its own service account: this
intake is the only consumer of samples that opens tasks, so the judge needs neither the database nor Kafka.

    intake = SampleIntake("localhost:9092", service, IntakeConfig(human_sources=("open*",), ai_sources=("gpt*",)))
    intake.consumer.poll_once()                       # or IntakeLoop(intake, ...).start()
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cheems import errors
from cheems.v1 import common_pb2
from services.annotation.service import AnnotationService
from services.bus import topics
from services.bus.client import EventConsumer

log = logging.getLogger(__name__)
INTAKE_GROUP = "cheems-annotation"


def matches(source: str, patterns: Sequence[str]) -> bool:
    """Whether a sample's source (e.g. "open.jsonl", "grpc") matches one of the fnmatch patterns."""
    return any(fnmatch.fnmatchcase(source, pattern) for pattern in patterns)


def take_sample(service: AnnotationService, sample: common_pb2.Sample, group_size: int) -> str | None:
    """Store the event's sample unless known and open its tasks; its prompt id, or None if the store refused it."""
    try:
        prompt_id, tasks = service.take_sample(
            sample.prompt_id,
            sample.prompt,
            [(r.id, r.content) for r in sample.responses],
            list(sample.category),
            sample.system_prompt or None,
            sample.source,
            [(m.role, m.content) for m in sample.history],
            group_size,
        )
    except (errors.InvalidInput, errors.NotFound, errors.Conflict) as e:
        log.warning("sample %s from %r skipped: %s", sample.prompt_id, sample.source, e)
        return None
    log.debug("prompt %s: %d tasks of %d open", prompt_id, len(tasks), group_size)
    return prompt_id


@dataclass(frozen=True)
class IntakeConfig:
    """human_sources: fnmatch patterns of `Sample.source` whose prompts people annotate (default: every one);
    ai_sources: those whose prompts the AI judge annotates, pair by pair (default: none; set it where a judge runs,
    as an open pair keeps its prompt from resolving); stale_after: seconds without a poll before liveness turns
    NOT_SERVING; group: the consumer group; delay: seconds to pause after each sample (tests stop a process
    mid-stream with it)."""

    human_sources: tuple[str, ...] = ("*",)
    ai_sources: tuple[str, ...] = ()
    stale_after: float = 600.0
    group: str = INTAKE_GROUP
    delay: float = 0.0

    def __post_init__(self) -> None:
        if not self.human_sources or not all(p.strip() for p in self.human_sources):
            raise ValueError(f"IntakeConfig.human_sources: expected non-empty patterns, got {self.human_sources!r}")
        if not all(p.strip() for p in self.ai_sources):
            raise ValueError(f"IntakeConfig.ai_sources: expected non-empty patterns, got {self.ai_sources!r}")
        if self.stale_after <= 0:
            raise ValueError(f"IntakeConfig.stale_after must be > 0, got {self.stale_after}")


class SampleIntake:
    """Consumes samples into triple-wise and pair tasks; counts what it took and skipped."""

    def __init__(self, bootstrap: str, service: AnnotationService, config: IntakeConfig = IntakeConfig()) -> None:
        self.service, self.config = service, config
        self.taken = self.skipped = 0
        self.consumer = EventConsumer(bootstrap, [topics.SAMPLES], config.group, self.handle)

    def handle(self, topic: str, key: str, event: Any) -> None:
        sample, sizes = event.sample, []
        if matches(sample.source, self.config.human_sources):
            sizes.append(3)
        if matches(sample.source, self.config.ai_sources):
            sizes.append(2)
        taken = [take_sample(self.service, sample, size) is not None for size in sizes]
        if taken and all(taken):
            self.taken += 1
        else:
            self.skipped += 1
        if self.config.delay:
            time.sleep(self.config.delay)

    def close(self) -> None:
        self.consumer.close()


class IntakeLoop:
    """Polls a consumer in a thread until `stop()`; `on_poll` after every poll (a heartbeat), `on_failure`
    once if the loop dies (`error` then holds why)."""

    def __init__(self, consumer: EventConsumer, on_poll: Callable[[], None], on_failure: Callable[[], None]) -> None:
        self.consumer, self.on_poll, self.on_failure = consumer, on_poll, on_failure
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sample-intake", daemon=True)

    def start(self) -> IntakeLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.consumer.run(self.stopping, self.on_poll)
        except BaseException as e:  # the process exits and restarts: uncommitted samples are redelivered
            log.exception("sample intake stopped")
            self.error = e
            self.on_failure()
