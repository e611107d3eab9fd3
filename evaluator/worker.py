"""The score worker: score requests from Kafka -> the scorer's RewardService over gRPC -> scores to Kafka.

    worker = ScoreWorker("localhost:9092", "localhost:50051", config=WorkerConfig(model_wait=60))
    worker.consumer.poll_once()   # or run it as a process: `cheems service eval-worker` (evaluator.process)

Each score is flushed to the broker before the request's offset is committed, so a killed worker
at worst scores a prompt twice; the result sink stores the first and ignores the replay.

A request of a registered model's run (`model_id` set) takes only a reply from that model (the
reply's `model`): while the scorer answers with another one (it has not switched to the new model
yet), the worker waits and asks again with growing pauses, up to `WorkerConfig.model_wait` seconds.
Then it publishes no scores for the request but a ScoreEvent with `error` ("the scorer at H serves
model X, not Y"), on which the sink fails the run, and skips the run's other requests. While it
waits, the consumer stays in its group (every partition paused, still polled), so the wait may
outlast the group's poll interval without the partitions moving to another worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from cheems.v1 import events_pb2, reward_pb2
from evaluator.errors import WorkerStopped, WrongModel
from services.bus import topics
from services.bus.client import JOIN_WAIT_MS, EventConsumer, Publisher

log = logging.getLogger(__name__)
WORKER_GROUP = "cheems-score-workers"
ABANDONED_KEPT = 1024  # runs given up on that this worker remembers (their other requests are skipped)


@dataclass(frozen=True)
class WorkerConfig:
    """How a score worker calls the scorer.

    model_wait: seconds a request of a registered model's run is asked again while the scorer answers
        with another model; past it the run fails (0 = fail at the first reply from another model).
    initial_backoff: the first pause between two asks (seconds); each next one doubles, up to max_backoff.
    call_timeout: deadline of one Score call (seconds).
    """

    model_wait: float = 120.0
    initial_backoff: float = 0.5
    max_backoff: float = 5.0
    call_timeout: float = 300.0

    def __post_init__(self) -> None:
        if self.model_wait < 0:
            raise ValueError(f"model_wait must be >= 0 seconds, got {self.model_wait}")
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError(
                f"initial_backoff must be > 0 and <= max_backoff, got {self.initial_backoff} and {self.max_backoff}"
            )
        if self.call_timeout <= 0:
            raise ValueError(f"call_timeout must be > 0 seconds, got {self.call_timeout}")


def pauses(config: WorkerConfig) -> Iterator[float]:
    """The pauses between asks, doubling from initial_backoff up to max_backoff, as long as model_wait allows."""
    pause, waited = config.initial_backoff, 0.0
    while waited < config.model_wait:
        step = min(pause, config.model_wait - waited)
        yield step
        waited += step
        pause = min(pause * 2, config.max_backoff)


class ScoreWorker:
    """Consumes score requests, calls the scorer, publishes scores (flushed before the offset commit).

    `stop`, once set, ends a wait for the run's model at once (WorkerStopped: the request is not committed).
    """

    def __init__(
        self,
        bootstrap: str,
        scorer_url: str,
        token: str = "",
        group: str = WORKER_GROUP,
        config: WorkerConfig | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        from services.scorer.client import RewardClient

        self.config, self.scorer_url, self.stop = config or WorkerConfig(), scorer_url, stop or threading.Event()
        self.client = RewardClient(scorer_url, token=token, timeout=self.config.call_timeout)
        self.publisher = Publisher(bootstrap)
        self.consumer = EventConsumer(bootstrap, [topics.SCORE_REQUESTS], group, self.handle, self.publisher)
        self.abandoned: OrderedDict[str, str] = OrderedDict()  # run id -> why its requests are skipped

    def handle(self, topic: str, key: str, event: Any) -> None:
        if event.run_id in self.abandoned:
            log.debug("skipping %s of run %s: %s", key, event.run_id, self.abandoned[event.run_id])
            return
        try:
            reply = self.score(event)
        except WrongModel as e:
            self._abandon(event.run_id, str(e))
            self._publish(key, score_event(event, error=str(e)))
            return
        self._publish(key, score_event(event, list(reply.scores), reply.model))

    def score(self, event: Any) -> reward_pb2.ScoreResponse:
        """The scorer's reply to the request, from the run's model when it names one; WrongModel after model_wait.

        While waiting, a scorer that is unavailable (restarting with the new model, say) counts as not
        switched yet; if it still is at the limit, its error is raised, as any error before the wait is.
        """
        wanted, started, asks = event.model_id, time.monotonic(), pauses(self.config)
        reply, unavailable = self._ask(event.request), None
        while wanted and (unavailable is not None or reply.model != wanted):
            pause = next(asks, None)
            if pause is None and unavailable is not None:
                raise unavailable
            if pause is None:
                raise WrongModel(
                    f"the scorer at {self.scorer_url} serves model {reply.model!r}, not {wanted!r} "
                    f"(asked for {time.monotonic() - started:.0f} s)"
                )
            log.info("run %s: the scorer serves %r, not %r yet; asking again in %.1f s", event.run_id,
                     "nothing" if unavailable else reply.model, wanted, pause)  # fmt: skip
            self._idle(pause)
            try:
                reply, unavailable = self._ask(event.request), None
            except grpc.RpcError as e:
                if e.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
                unavailable = e
        return reply

    def _ask(self, request: reward_pb2.ScoreRequest) -> reward_pb2.ScoreResponse:
        history = [(m.role, m.content) for m in request.history]
        return self.client.score_full(request.prompt, list(request.responses), request.system_prompt, history)

    def _idle(self, seconds: float) -> None:
        """Wait inside the handler while staying in the group: every partition paused, the consumer polled.

        A partition assigned during the wait (a rebalance) is sought back to its first record and paused
        too, so no record is skipped; all are resumed afterwards. WorkerStopped once `stop` is set.
        """
        kafka = self.consumer.consumer
        end = time.monotonic() + seconds
        try:
            while (left := end - time.monotonic()) > 0:
                if self.stop.is_set():
                    raise WorkerStopped("the worker stopped while waiting for the scorer's model")
                kafka.pause(*kafka.assignment())
                timeout = JOIN_WAIT_MS if self.consumer.membership.joining else min(left, 1.0) * 1000
                for partition, records in kafka.poll(timeout_ms=int(timeout)).items():
                    kafka.seek(partition, records[0].offset)
                    kafka.pause(partition)
        finally:
            kafka.resume(*kafka.paused())

    def _abandon(self, run_id: str, reason: str) -> None:
        log.warning("run %s: %s; its requests are skipped", run_id, reason)
        self.abandoned[run_id] = reason
        while len(self.abandoned) > ABANDONED_KEPT:
            self.abandoned.popitem(last=False)

    def _publish(self, key: str, event: events_pb2.ScoreEvent) -> None:
        self.publisher.publish(topics.SCORES, key, event)
        self.publisher.flush()

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()
        self.client.close()


def score_event(
    request: Any, scores: list[float] | None = None, model_id: str = "", error: str = ""
) -> events_pb2.ScoreEvent:
    """The answer to a ScoreRequestEvent: its scores and the model that gave them, or why there are none."""
    return events_pb2.ScoreEvent(
        header=events_pb2.EventHeader(event_id=request.header.event_id, producer="worker"),
        run_id=request.run_id,
        subset=request.subset,
        prompt_id=request.prompt_id,
        response_ids=request.response_ids,
        scores=scores or [],
        model_id=model_id,
        error=error,
    )
