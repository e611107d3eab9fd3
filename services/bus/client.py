"""Publishing and consuming events with kafka-python.

`Publisher`: acks=all with retries, keyed by prompt id so one prompt's events keep their order;
every event carries the codec's headers (`content-type`, `cheems-schema-version`, `cheems-type`).
`EventConsumer`: a consumer group member; each polled batch (at most `max_poll_records`) is decoded
and handed to the handler, one event per call, or to a batch handler, the whole batch in one call;
offsets are committed only after the handler returned (at-least-once: handlers must be idempotent,
e.g. upserts keyed by event id). A message that does not decode is logged, counted, copied to
`<topic>.dlq` with the reason in a header, and skipped; it never stops the consumer, and the rest of
its batch is handled. `stats` adds up where a consumer's time goes (poll, decode, handler, commit).

Nothing is committed before the broker acknowledged what the batch sent: the dead letters are flushed and each
send's result checked first. A handler whose own sends failed raises `Redeliver` (after `Publisher.confirm`);
then, as when a dead letter fails, the producer is renewed, nothing is committed, and the consumer seeks back to
the batch's first records, so its next poll (after a pause that grows while it keeps failing) hands the same
batch over again: a producer that failed for good (its broker replaced) loses nothing.

While the member is joining a group, a poll waits for the join to finish (up to the rebalance
timeout) whatever timeout the caller asked for. kafka-python 3.0.12 throws away a join that
completes between two polls and starts a new one, so a consumer polled briefly with pauses in
between (two consumers polled in turn by one thread, a test that sleeps) could rejoin forever
and never be assigned a partition.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn

from google.protobuf.message import Message
from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.errors import CommitFailedError, KafkaError

from cheems import errors
from cheems.settings import Settings
from services.bus import metrics, spans
from services.bus.codec import BadMessage, decode, encode
from services.bus.security import KafkaSecurity, connection_kwargs
from services.bus.topics import dead_letter

log = logging.getLogger(__name__)
# Tansu and kafka-python join a group in ~3 s with these instead of ~20 s with the defaults.
CONSUMER_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "max_poll_interval_ms": 10000}
JOIN_WAIT_MS = CONSUMER_TIMEOUTS["max_poll_interval_ms"]  # the rebalance timeout: a JoinGroup answers within it
MAX_POLL_RECORDS = 16  # small batches keep each poll well inside max_poll_interval_ms
# bytes of one partition's record batch: at the default 16 KiB, a burst of 2.5 KB events (a run's score requests)
# made a new batch, and woke the sender thread, every few events (a third of StartRun's time, measured)
PRODUCER_BATCH_BYTES = 256 * 1024
Handler = Callable[[str, str, Message], None]  # (topic, key, event)
# after a batch that is polled again (Redeliver): a pause, doubling from the first up to the largest, which stays
# well inside max_poll_interval_ms
REDELIVER_PAUSES_S = (0.2, 3.0)


class Redeliver(errors.Unavailable):
    """Raised by a handler whose batch did not take full effect (the broker did not acknowledge what it sent):
    nothing of the batch is committed, and the consumer hands the same batch over again."""


class Delivery(NamedTuple):
    """One decoded event of a polled batch."""

    topic: str
    key: str
    event: Message
    context: Any = None  # the trace context its handling goes on in (`services.bus.spans`), None: the current one


BatchHandler = Callable[[list[Delivery]], None]  # a polled batch's events, in the order polled


class Publisher:
    def __init__(
        self,
        bootstrap: str,
        max_block_ms: int = 60000,
        security: KafkaSecurity | None = None,
        connect: bool = True,
    ) -> None:
        """`max_block_ms`: how long `publish` may wait for the broker's metadata before KafkaTimeoutError.

        `security`: the credentials (default: the environment's, `services.bus.security`). `connect`: reach the
        broker now (an unreachable one raises NoBrokersAvailable here, a start-up check); False: at the first
        publish, waiting up to `max_block_ms` (a service that must start while the broker is away: a relay).
        """
        self.max_block_ms = max_block_ms
        idempotent = Settings().kafka_idempotence
        self._settings: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            **connection_kwargs(security),
            "acks": "all",
            # kafka-python 3's default, made explicit (a conflicting setting then raises); off only where the broker
            # is the embedded one on disk (CHEEMS_KAFKA_IDEMPOTENCE=false: `cheems up`, services.bus.broker)
            "enable_idempotence": idempotent,
            # without idempotence a retried batch could overtake the next one: one request in flight keeps a key's
            # events in order (with it, the broker orders them by sequence; kafka-python allows 5)
            "max_in_flight_requests_per_connection": 5 if idempotent else 1,
            "retries": 5,
            "linger_ms": 5,
            "max_block_ms": max_block_ms,
            "batch_size": PRODUCER_BATCH_BYTES,
        }
        self._producer: Any = None
        self._guard = threading.Lock()
        if connect:
            self._connect({})

    @property
    def producer(self) -> Any:
        """kafka-python's KafkaProducer: connected now if it is not yet (or no longer: `renew`)."""
        return self._producer or self._connect({"bootstrap_timeout_ms": self.max_block_ms})

    def _connect(self, options: dict[str, Any]) -> Any:
        from kafka import KafkaProducer

        with self._guard:
            if self._producer is None:
                self._producer = KafkaProducer(**self._settings, **options)
            return self._producer

    def publish(self, topic: str, key: str, event: Message, context: Any = None) -> Any:
        """Send asynchronously; returns kafka-python's future (`.get(timeout)` waits for the broker's ack).

        The record carries the W3C trace context of its PRODUCER span, the child of `context` (an OpenTelemetry
        Context, default the current one): `services.bus.spans`."""
        encoded = encode(topic, event)
        with spans.sending(topic, key, context) as traced:
            headers = [*encoded.headers, *traced]
            return self.producer.send(topic, key=key.encode(), value=encoded.value, headers=headers)

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> Any:
        """Send the bytes as they are; returns kafka-python's future, as `publish` does."""
        return self.producer.send(topic, key=key, value=value, headers=headers)

    def flush(self, timeout: float | None = None) -> None:
        """Send what is pending now (not after linger_ms) and wait for it; KafkaTimeoutError after `timeout` s.

        It raises no send's error: a failed send is seen only in its future (`confirm`)."""
        if self._producer is not None:
            self._producer.flush(timeout=timeout)

    def confirm(self, sent: Sequence[Any], timeout: float | None = None) -> None:
        """Flush, then check every send in `sent` (the futures `publish` and `send_raw` returned): the first
        failed send's KafkaError unless the broker acknowledged each; `timeout` bounds the whole wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush(timeout)
        for future in sent:  # done after the flush: each acknowledged, or failed (its error raised here)
            future.get(timeout=None if deadline is None else max(0.001, deadline - time.monotonic()))

    def renew(self) -> None:
        """Drop the producer at once, failing what it has not sent, and connect a new one at the next publish.

        After a failed send: an idempotent producer whose broker was replaced fails every later send (seen:
        InitProducerId UnknownError, forever), and batches left to retry could reach the broker later, behind
        events sent since. Sends of other threads in flight fail too (their futures raise).
        """
        with self._guard:
            old, self._producer = self._producer, None
        if old is not None:
            _abandon(old)

    def close(self, timeout: float | None = None) -> None:
        """Send what is pending and close; `timeout` bounds the wait (None: until sent, however long)."""
        with self._guard:
            old, self._producer = self._producer, None
        if old is not None:
            old.close(timeout=timeout)


def redeliver(publisher: Publisher, what: str, error: KafkaError) -> NoReturn:
    """The broker did not take `what` a batch's handling sent: renew the producer (one whose broker was replaced
    stays failed) and raise Redeliver, so nothing of the batch is committed and it is handed over again."""
    publisher.renew()
    raise Redeliver(f"the broker did not take {what}: {error!r}") from None


def _abandon(producer: Any) -> None:
    """Close `producer` now, failing its unsent batches. kafka-python's close(0) refuses while batches are
    pending (its flush times out first), so its sender is force-closed first: it fails them and ends."""
    sender = getattr(producer, "_sender", None)  # kafka-python 3.0.12's I/O thread (pinned in pyproject.toml)
    if sender is not None:
        sender.force_close()
        sender.join(5.0)
    try:
        producer.close(timeout=0)
    except KafkaError as e:
        log.warning("a dropped producer did not close cleanly: %r", e)


@dataclass
class ConsumerStats:
    """Counts and seconds, added up since the consumer was made (seconds by `time.perf_counter`)."""

    handled: int = 0
    dead_lettered: int = 0
    batches: int = 0  # polls that returned records
    join_s: float = 0.0  # in polls begun while joining the group (waiting for the join to finish)
    poll_s: float = 0.0  # in other polls that returned records
    idle_s: float = 0.0  # in other polls that returned none (waiting for records)
    decode_s: float = 0.0
    handle_s: float = 0.0  # in the handler
    commit_s: float = 0.0  # flushing dead letters and committing offsets
    redelivered: int = 0  # batches not committed and polled again (Redeliver)


class Membership(ConsumerRebalanceListener):
    """Tracks whether the consumer is between a rebalance's start and its assignment.

    A kafka-python rebalance listener: revocation opens a join (it is also called, with nothing to
    revoke, before the first join), an assignment closes it, losing the membership opens one again.
    """

    def __init__(self) -> None:
        self.joining = True  # nothing is assigned before the first join
        self.rebalances = 0

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.joining = True

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.joining = False
        self.rebalances += 1

    def on_partitions_lost(self, lost: Any) -> None:
        self.joining = True


class EventConsumer:
    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        group: str,
        handler: Handler | None = None,
        dead_letters: Publisher | None = None,
        *,
        batch_handler: BatchHandler | None = None,
        max_poll_records: int = MAX_POLL_RECORDS,
        security: KafkaSecurity | None = None,
    ) -> None:
        """Give `handler` (called per event) or `batch_handler` (called once per polled batch), not both.

        `security`: the credentials (default: the environment's), also those of the dead-letter publisher made here.
        """
        from kafka import KafkaConsumer

        if (handler is None) == (batch_handler is None):
            raise ValueError("give either handler or batch_handler")
        if max_poll_records < 1:
            raise ValueError(f"max_poll_records must be >= 1, got {max_poll_records}")
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=max_poll_records,
            **CONSUMER_TIMEOUTS,
            **connection_kwargs(security),
        )
        self.membership = Membership()
        self.consumer.subscribe(topics=list(topics), listener=self.membership)
        self.group, self.lag, self.dead_letters_by_topic = group, metrics.Lag(), dict[str, int]()  # /metrics
        metrics.report(self)
        self.handler, self.batch_handler = handler, batch_handler
        self.dead_letters = dead_letters or Publisher(bootstrap, security=security)
        self._owns_dead_letters = dead_letters is None
        self._dead_sent: list[Any] = []  # the futures of this batch's dead letters
        self._pause = 0.0  # before polling a batch again that was not committed
        self.stats = ConsumerStats()

    def poll_once(self, timeout_ms: int = 500) -> int:
        """Handle one polled batch and commit it; returns how many records it held.

        While the group is (re)balancing this waits up to JOIN_WAIT_MS, so that the join is awaited
        to its end rather than abandoned (see the module docstring). A batch whose handler raised Redeliver, or
        whose dead letters the broker did not acknowledge, is not committed but sought back to (polled again).
        """
        records = self._poll(timeout_ms)
        if not records:
            return 0
        try:
            self._handle(records)
        except Redeliver as e:
            self._rewind(records, e)
            return len(records)
        started = time.perf_counter()
        try:
            self.consumer.commit()
        except CommitFailedError as e:  # a rebalance took our partitions: they are redelivered, sinks are idempotent
            log.warning("offset commit failed, the batch will be redelivered: %s", e)
        self.stats.commit_s += time.perf_counter() - started
        self._pause = 0.0
        return len(records)

    def _poll(self, timeout_ms: int) -> list[Any]:
        joining, stats = self.membership.joining, self.stats
        if joining:
            timeout_ms = max(timeout_ms, JOIN_WAIT_MS)
        started = time.perf_counter()
        records = [r for batch in self.consumer.poll(timeout_ms=timeout_ms).values() for r in batch]
        polled = time.perf_counter() - started
        self.lag = metrics.consumer_lag(self.consumer)
        if joining:
            stats.join_s += polled
        elif records:
            stats.poll_s += polled
        else:
            stats.idle_s += polled
        return records

    def _handle(self, records: list[Any]) -> None:
        """Decode and dispatch the batch, then wait for its dead letters' acknowledgements (Redeliver if not)."""
        stats, started = self.stats, time.perf_counter()
        stats.batches += 1
        self._dead_sent = []
        decoded_records = [(r, d) for r in records if (d := self._decode(r)) is not None]
        decoded = time.perf_counter()
        stats.decode_s += decoded - started
        self._dispatch(decoded_records)
        handled = time.perf_counter()
        stats.handle_s += handled - decoded
        sent, self._dead_sent = self._dead_sent, []
        try:
            if sent:
                self.dead_letters.confirm(sent)
        except KafkaError as e:
            self._dead_letters_failed(len(sent), e)
        finally:
            stats.commit_s += time.perf_counter() - handled

    def _dead_letters_failed(self, count: int, error: KafkaError) -> NoReturn:
        redeliver(self.dead_letters, f"{count} dead letters", error)

    def _rewind(self, records: list[Any], error: Redeliver) -> None:
        """Seek each partition of the batch back to its first record (the next poll hands the batch over again),
        after a pause that doubles while batches keep failing."""
        first: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            first[tp] = min(first.get(tp, r.offset), r.offset)
        assigned = self.consumer.assignment()
        for tp, offset in first.items():
            if tp in assigned:  # one lost to a rebalance meanwhile: its new owner starts at the committed offset
                self.consumer.seek(tp, offset)
        self.stats.redelivered += 1
        low, high = REDELIVER_PAUSES_S
        self._pause = min(max(2 * self._pause, low), high)
        log.warning("a batch of %d records is not committed; polled again in %.1f s: %s", len(records), self._pause,
                    error)  # fmt: skip
        time.sleep(self._pause)

    def _dispatch(self, decoded: list[tuple[Any, Delivery]]) -> None:
        """Hand the events over, each handled in its trace (a CONSUMER span: `services.bus.spans`)."""
        if self.batch_handler is not None:
            if decoded:
                with spans.processing_batch([r for r, _ in decoded], self.group) as contexts:
                    self.batch_handler([d._replace(context=c) for (_, d), c in zip(decoded, contexts, strict=True)])
                self.stats.handled += len(decoded)
            return
        assert self.handler is not None  # one of the two is set (__init__)
        for record, delivery in decoded:
            with spans.processing(record, self.group):
                self.handler(delivery.topic, delivery.key, delivery.event)
            self.stats.handled += 1

    def _decode(self, record: Any) -> Delivery | None:
        """The record's event, or None after dead-lettering a record that does not decode."""
        key = record.key.decode(errors="replace") if record.key else ""
        try:
            return Delivery(record.topic, key, decode(record.topic, record.value, list(record.headers or [])))
        except BadMessage as e:
            log.warning("dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, e)
            headers = [*list(record.headers or []), ("cheems-error", str(e).encode())]
            try:
                sent = self.dead_letters.send_raw(dead_letter(record.topic), record.key, record.value, headers)
            except KafkaError as error:  # no metadata in max_block_ms: the broker is away
                self._dead_letters_failed(1, error)
            self._dead_sent.append(sent)
            self.stats.dead_lettered += 1
            self.dead_letters_by_topic[record.topic] = self.dead_letters_by_topic.get(record.topic, 0) + 1
            return None

    def run(self, stop: threading.Event, on_poll: Callable[[], None] | None = None) -> None:
        """Poll until `stop` is set; `on_poll` runs after every poll (a liveness heartbeat)."""
        while not stop.is_set():
            self.poll_once()
            if on_poll is not None:
                on_poll()

    def close(self) -> None:
        metrics.forget(self)
        self.consumer.close()
        if self._owns_dead_letters:
            self.dead_letters.close(timeout=10)
