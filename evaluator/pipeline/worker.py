"""The score worker: score requests from Kafka -> the scorer's RewardService over gRPC -> scores to Kafka.

    worker = ScoreWorker("localhost:9092", "localhost:50051", config=WorkerConfig(model_wait=60))
    worker.consumer.poll_once()   # or run it as a process: `cheems service eval-worker` (evaluator.pipeline.process)

A polled batch (up to `WorkerConfig.batch_size` requests) is scored in ScoreBatch calls of up to
`call_items` requests (`calls_in_flight` of them under way at once), and its scores are published in
order and flushed to the broker once, each send's result checked, before the batch's offsets are committed:
a killed worker at worst scores a prompt twice; the result sink stores the first and ignores the replay. A
send the broker did not acknowledge (a producer that failed for good after its broker was replaced: kafka-python's
InitProducerId UnknownError) commits nothing: the producer is renewed, the failure logged and counted
(`WorkerStats.publish_failures`), and the batch handed over again (`services.bus.client.Redeliver`) and scored
anew. A ScoreBatch call the scorer refuses (one request too long, say) or does not know is asked again one request at a
time, so one bad request never holds up the others: a request the scorer refuses by itself gets a
ScoreEvent with `error` (its run fails with the reason) instead of stopping the worker at it after
every restart. A scorer that cannot be reached raises (nothing of the batch is committed; it is
redelivered).

A request of a registered model's run (`model_id` set) takes only a reply from that model (the
reply's `model`): while the scorer answers with another one (it has not switched to the new model
yet), the worker waits and asks again with growing pauses, up to `WorkerConfig.model_wait` seconds.
Then it publishes no scores for the request but a ScoreEvent with `error` ("the scorer at H serves
model X, not Y"), on which the sink fails the run, and skips the run's other requests. While it
waits, the consumer stays in its group (every partition paused, still polled), so the wait may
outlast the group's poll interval without the partitions moving to another worker.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from kafka.errors import KafkaError

from cheems.v1 import events_pb2, reward_pb2
from evaluator.errors import WorkerStopped, WrongModel
from evaluator.pipeline.score_batch import match_replies, model_not_served, one_by_one, refused, score_event
from services.bus import topics
from services.bus.client import JOIN_WAIT_MS, Delivery, EventConsumer, Publisher, redeliver
from services.channels import tls_credentials
from services.grpc_errors import error_reason
from services.scorer.client import RewardClient, chunks

log = logging.getLogger(__name__)
WORKER_GROUP = "cheems-score-workers"
ABANDONED_KEPT = 1024  # runs given up on that this worker remembers (their other requests are skipped)
# between two ScoreBatch calls of one batch, a poll (partitions paused) once this long has passed since the
# last: a batch of slow calls then never outlasts the group's max_poll_interval_ms (10 s)
STAY_IN_GROUP_S = 2.0


@dataclass(frozen=True)
class WorkerConfig:
    """How a score worker calls the scorer.

    model_wait: seconds a request of a registered model's run is asked again while the scorer answers
        with another model; past it the run fails (0 = fail at the first reply from another model).
    initial_backoff: the first pause between two asks (seconds); each next one doubles, up to max_backoff.
    call_timeout: deadline of one Score or ScoreBatch call (seconds).
    batch_size: score requests taken per poll (the consumer's max_poll_records); their scores are
        flushed once and their offsets committed once.
    call_items: requests per ScoreBatch call, at most the scorer's `max_batch_items` (128 by default).
    calls_in_flight: ScoreBatch calls of one batch under way at once (the scorer works on the next while
        the worker publishes the last one's scores; a scorer with several cores works on several).
    tls_ca: PEM file of the CA a scorer serving TLS is signed by ("" = plaintext).
    """

    model_wait: float = 120.0
    initial_backoff: float = 0.5
    max_backoff: float = 5.0
    call_timeout: float = 300.0
    batch_size: int = 256
    call_items: int = 32
    calls_in_flight: int = 2
    tls_ca: str = ""

    def __post_init__(self) -> None:
        if self.model_wait < 0:
            raise ValueError(f"model_wait must be >= 0 seconds, got {self.model_wait}")
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError(
                f"initial_backoff must be > 0 and <= max_backoff, got {self.initial_backoff} and {self.max_backoff}"
            )
        if self.call_timeout <= 0:
            raise ValueError(f"call_timeout must be > 0 seconds, got {self.call_timeout}")
        for field in ("batch_size", "call_items", "calls_in_flight"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")


@dataclass
class WorkerStats:
    """Where a worker's handler time goes, added up (seconds by `time.perf_counter`)."""

    calls: int = 0  # ScoreBatch and Score calls
    one_by_one: int = 0  # ScoreBatch calls failed and asked again one request at a time
    score_s: float = 0.0  # waiting for the scorer's replies (the calls in flight overlap: waits are counted)
    publish_s: float = 0.0  # handing scores to the producer, flushing them, checking each was acknowledged
    publish_failures: int = 0  # batches whose scores the broker did not take (not committed: scored again)


def pauses(config: WorkerConfig) -> Iterator[float]:
    """The pauses between asks, doubling from initial_backoff up to max_backoff, as long as model_wait allows."""
    pause, waited = config.initial_backoff, 0.0
    while waited < config.model_wait:
        step = min(pause, config.model_wait - waited)
        yield step
        waited += step
        pause = min(pause * 2, config.max_backoff)


def not_served(error: grpc.RpcError) -> bool:
    return model_not_served(error.code(), error_reason(error))


class ScoreWorker:
    """Consumes score requests in batches, calls the scorer, publishes scores (flushed before the offset commit).

    `stop`, once set, ends a wait for the run's model at once (WorkerStopped: the batch is not committed).
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
        self.config, self.scorer_url, self.stop = config or WorkerConfig(), scorer_url, stop or threading.Event()
        tls = tls_credentials(self.config.tls_ca)
        self.client = RewardClient(scorer_url, token=token, timeout=self.config.call_timeout, credentials=tls)
        self.publisher = Publisher(bootstrap)
        self.consumer = EventConsumer(
            bootstrap, [topics.SCORE_REQUESTS], group, dead_letters=self.publisher,
            batch_handler=self.handle_batch, max_poll_records=self.config.batch_size,
        )  # fmt: skip
        self.abandoned: OrderedDict[str, str] = OrderedDict()  # run id -> why its requests are skipped
        self._sent: list[Any] = []  # this batch's sends (kafka-python futures)
        self._given_up: list[str] = []  # the runs this batch gave up on
        self.stats = WorkerStats()
        self._polled = time.monotonic()
        self._calls = ThreadPoolExecutor(self.config.calls_in_flight, thread_name_prefix="score-calls")

    def handle(self, topic: str, key: str, event: Any) -> None:
        """One request: a batch of one."""
        self.handle_batch([Delivery(topic, key, event)])

    def handle_batch(self, deliveries: list[Delivery]) -> None:
        """Score the batch in ScoreBatch calls of `call_items` (`calls_in_flight` at once) and publish every
        answer in order, flushed once; Redeliver unless the broker acknowledged every one."""
        self._polled, self._sent, self._given_up = time.monotonic(), [], []
        try:
            self._score(deliveries)
            self._confirm()
        except BaseException:  # not committed: a run given up on here is asked about again when it comes back
            for run_id in self._given_up:
                self.abandoned.pop(run_id, None)
            raise

    def _score(self, deliveries: list[Delivery]) -> None:
        pending = [d for d in deliveries if not self._skipped(d)]
        calls = [(chunk, self._ask_batch(chunk)) for chunk in chunks(pending, self.config.call_items)]
        try:
            for chunk, call in calls:
                self._answer(chunk, call)
                if time.monotonic() - self._polled > STAY_IN_GROUP_S:
                    self._stay_in_group()
        finally:
            for _, call in calls:
                call.cancel()  # after a failure: the calls not begun yet are not made

    def _confirm(self) -> None:
        """Flush the batch's scores and check each send's result: Redeliver unless every one was acknowledged."""
        started = time.perf_counter()
        try:
            self.publisher.confirm(self._sent)
        except KafkaError as e:
            self._not_published(len(self._sent), e)
        finally:
            self.stats.publish_s += time.perf_counter() - started

    def _not_published(self, count: int, error: KafkaError) -> NoReturn:
        self.stats.publish_failures += 1
        log.warning("the broker did not take %d scores (%r): nothing committed, the batch is scored again", count,
                    error)  # fmt: skip
        redeliver(self.publisher, f"{count} scores", error)

    def _ask_batch(self, chunk: list[Delivery]) -> Future[list[reward_pb2.ScoreResponse]]:
        self.stats.calls += 1
        traced = contextvars.copy_context()  # in the batch's trace: the call's span is the consumer span's child
        return self._calls.submit(traced.run, self.client.score_batch, [d.event.request for d in chunk])

    def _answer(self, chunk: list[Delivery], call: Future[list[reward_pb2.ScoreResponse]]) -> None:
        """Publish the call's scores; a call the scorer refused as a whole is asked again one request at a time."""
        try:
            replies = self._wait(call)
        except grpc.RpcError as e:
            if not one_by_one(e.code(), error_reason(e)):
                raise  # the scorer is away or failed: nothing is committed, the batch is redelivered
            log.warning("ScoreBatch of %d requests failed (%s: %s); asking one at a time", len(chunk),
                        e.code().name, e.details())  # fmt: skip
            self.stats.one_by_one += 1
            for delivery in chunk:
                self._handle_one(delivery)
            return
        answered, waiting = match_replies(chunk, replies)
        for delivery, reply in answered:
            if not self._skipped(delivery):  # its run may have been given up on since the call was made
                self._publish(delivery, score_event(delivery.event, list(reply.scores), reply.model))
        for delivery in waiting:  # their run's model is not served yet: wait for it one request at a time
            self._handle_one(delivery)

    def _wait(self, call: Future[list[reward_pb2.ScoreResponse]]) -> list[reward_pb2.ScoreResponse]:
        started = time.perf_counter()
        try:
            return call.result()
        finally:
            self.stats.score_s += time.perf_counter() - started

    def _handle_one(self, delivery: Delivery) -> None:
        key, event = delivery.key, delivery.event
        if self._skipped(delivery):
            return
        try:
            reply = self.score(event)
        except WrongModel as e:
            self._give_up(delivery, str(e))
            return
        except grpc.RpcError as e:
            if not refused(e.code(), error_reason(e)):
                raise
            self._give_up(delivery, f"the scorer at {self.scorer_url} refused {key}: {e.code().name}: {e.details()}")
            return
        self._publish(delivery, score_event(event, list(reply.scores), reply.model))

    def _skipped(self, delivery: Delivery) -> bool:
        run_id = delivery.event.run_id
        if run_id in self.abandoned:
            log.debug("skipping %s of run %s: %s", delivery.key, run_id, self.abandoned[run_id])
        return run_id in self.abandoned

    def _give_up(self, delivery: Delivery, reason: str) -> None:
        """No scores for the request but an event saying why (the sink fails the run); skip the run's others."""
        self._abandon(delivery.event.run_id, reason)
        self._publish(delivery, score_event(delivery.event, error=reason))

    def score(self, event: Any) -> reward_pb2.ScoreResponse:
        """The scorer's reply to the request, from the run's model when it names one; WrongModel after model_wait.

        While waiting, a scorer that is unavailable (restarting with the new model, say) counts as not
        switched yet; if it still is at the limit, its error is raised, as any error before the wait is.
        """
        wanted, started, asks = event.model_id, time.monotonic(), pauses(self.config)
        reply, unavailable = reward_pb2.ScoreResponse(), None
        try:
            reply = self._ask(event.request)
        except grpc.RpcError as e:
            if not (wanted and not_served(e)):
                raise
            unavailable = e
        while wanted and (unavailable is not None or reply.model != wanted):
            pause = next(asks, None)
            waited = f"asked for {time.monotonic() - started:.0f} s"
            if pause is None and unavailable is not None and not_served(unavailable):
                why = unavailable.details()
                raise WrongModel(f"the scorer at {self.scorer_url} does not serve model {wanted!r} ({why}; {waited})")
            if pause is None and unavailable is not None:
                raise unavailable
            if pause is None:
                raise WrongModel(
                    f"the scorer at {self.scorer_url} serves model {reply.model!r}, not {wanted!r} ({waited})"
                )
            log.info("run %s: the scorer serves %r, not %r yet; asking again in %.1f s", event.run_id,
                     "nothing" if unavailable else reply.model, wanted, pause)  # fmt: skip
            self._idle(pause)
            try:
                reply, unavailable = self._ask(event.request), None
            except grpc.RpcError as e:
                if e.code() is not grpc.StatusCode.UNAVAILABLE and not not_served(e):
                    raise
                unavailable = e
        return reply

    def _ask(self, request: reward_pb2.ScoreRequest) -> reward_pb2.ScoreResponse:
        history = [(m.role, m.content) for m in request.history]
        return self._timed(
            self.client.score_full,
            *(request.prompt, list(request.responses), request.system_prompt, history, None, request.model),
        )

    def _timed(self, call: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.stats.calls += 1
            self.stats.score_s += time.perf_counter() - started

    def _idle(self, seconds: float) -> None:
        """Wait inside the handler while staying in the group: every partition paused, the consumer polled.

        WorkerStopped once `stop` is set.
        """
        end = time.monotonic() + seconds
        try:
            while (left := end - time.monotonic()) > 0:
                if self.stop.is_set():
                    raise WorkerStopped("the worker stopped while waiting for the scorer's model")
                self._poll_paused(min(left, 1.0))
        finally:
            self._resume()

    def _stay_in_group(self) -> None:
        """One poll between two calls of a long batch, so the group does not count this member as gone."""
        try:
            self._poll_paused(0.0)
        finally:
            self._resume()

    def _poll_paused(self, seconds: float) -> None:
        """Poll with every partition paused: the membership stays alive and nothing is fetched.

        A partition assigned meanwhile (a rebalance) is sought back to its first record and paused too,
        so no record is skipped.
        """
        kafka = self.consumer.consumer
        kafka.pause(*kafka.assignment())
        timeout = JOIN_WAIT_MS if self.consumer.membership.joining else seconds * 1000
        for partition, records in kafka.poll(timeout_ms=int(timeout)).items():
            kafka.seek(partition, records[0].offset)
            kafka.pause(partition)
        self._polled = time.monotonic()

    def _resume(self) -> None:
        kafka = self.consumer.consumer
        kafka.resume(*kafka.paused())

    def _abandon(self, run_id: str, reason: str) -> None:
        log.warning("run %s: %s; its requests are skipped", run_id, reason)
        self.abandoned[run_id] = reason
        self._given_up.append(run_id)
        while len(self.abandoned) > ABANDONED_KEPT:
            self.abandoned.popitem(last=False)

    def _publish(self, request: Delivery, event: events_pb2.ScoreEvent) -> None:
        """Hand the request's score to the producer (in the request's trace); `handle_batch` flushes the batch's
        scores once, at its end."""
        started = time.perf_counter()
        try:
            self._sent.append(self.publisher.publish(topics.SCORES, request.key, event, request.context))
        except KafkaError as e:  # no metadata within max_block_ms: the broker is away
            self._not_published(len(self._sent) + 1, e)
        finally:
            self.stats.publish_s += time.perf_counter() - started

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()
        self._calls.shutdown(cancel_futures=True)
        self.client.close()
