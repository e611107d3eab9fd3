"""Publishing and consuming events with kafka-python.

`Publisher`: acks=all with retries, keyed by prompt id so one prompt's events keep their order;
every event carries the codec's headers (`content-type`, `cheems-schema-version`, `cheems-type`).
`EventConsumer`: a consumer group member; each polled batch is decoded and handed to the handler,
and offsets are committed only after the handler returned (at-least-once: handlers must be
idempotent, e.g. upserts keyed by event id). A message that does not decode is logged, counted,
copied to `<topic>.dlq` with the reason in a header, and skipped; it never stops the consumer.

While the member is joining a group, a poll waits for the join to finish (up to the rebalance
timeout) whatever timeout the caller asked for. kafka-python 3.0.12 throws away a join that
completes between two polls and starts a new one, so a consumer polled briefly with pauses in
between (two consumers polled in turn by one thread, a test that sleeps) could rejoin forever
and never be assigned a partition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from kafka import ConsumerRebalanceListener
from kafka.errors import CommitFailedError

from services.bus.codec import BadMessage, decode, encode
from services.bus.topics import dead_letter

log = logging.getLogger(__name__)
# Tansu and kafka-python join a group in ~3 s with these instead of ~20 s with the defaults.
CONSUMER_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "max_poll_interval_ms": 10000}
JOIN_WAIT_MS = CONSUMER_TIMEOUTS["max_poll_interval_ms"]  # the rebalance timeout: a JoinGroup answers within it
MAX_POLL_RECORDS = 16  # small batches keep each poll well inside max_poll_interval_ms
Handler = Callable[[str, str, Message], None]  # (topic, key, event)


class Publisher:
    def __init__(self, bootstrap: str, max_block_ms: int = 60000) -> None:
        """`max_block_ms`: how long `publish` may wait for the broker's metadata before KafkaTimeoutError."""
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", retries=5, linger_ms=5, max_block_ms=max_block_ms
        )

    def publish(self, topic: str, key: str, event: Message) -> Any:
        """Send asynchronously; returns kafka-python's future (`.get(timeout)` waits for the broker's ack)."""
        encoded = encode(topic, event)
        return self.producer.send(topic, key=key.encode(), value=encoded.value, headers=encoded.headers)

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        self.producer.send(topic, key=key, value=value, headers=headers)

    def flush(self, timeout: float | None = None) -> None:
        """Send what is pending now (not after linger_ms) and wait for it; KafkaTimeoutError after `timeout` s."""
        self.producer.flush(timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send what is pending and close; `timeout` bounds the wait (None: until sent, however long)."""
        self.producer.close(timeout=timeout)


@dataclass
class ConsumerStats:
    handled: int = 0
    dead_lettered: int = 0


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
        self, bootstrap: str, topics: Sequence[str], group: str, handler: Handler, dead_letters: Publisher | None = None
    ) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=MAX_POLL_RECORDS,
            **CONSUMER_TIMEOUTS,
        )
        self.membership = Membership()
        self.consumer.subscribe(topics=list(topics), listener=self.membership)
        self.handler, self.dead_letters = handler, dead_letters or Publisher(bootstrap)
        self._owns_dead_letters = dead_letters is None
        self.stats = ConsumerStats()

    def poll_once(self, timeout_ms: int = 500) -> int:
        """Handle one polled batch and commit it; returns how many records it held.

        While the group is (re)balancing this waits up to JOIN_WAIT_MS, so that the join is awaited
        to its end rather than abandoned (see the module docstring).
        """
        if self.membership.joining:
            timeout_ms = max(timeout_ms, JOIN_WAIT_MS)
        batches = self.consumer.poll(timeout_ms=timeout_ms)
        records = [r for batch in batches.values() for r in batch]
        for record in records:
            self._handle(record)
        if records:
            self.dead_letters.flush()
            try:
                self.consumer.commit()
            except (
                CommitFailedError
            ) as e:  # a rebalance took our partitions: they are redelivered, sinks are idempotent
                log.warning("offset commit failed, the batch will be redelivered: %s", e)
        return len(records)

    def _handle(self, record: Any) -> None:
        key = record.key.decode(errors="replace") if record.key else ""
        try:
            event = decode(record.topic, record.value, list(record.headers or []))
        except BadMessage as e:
            log.warning("dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, e)
            headers = [*list(record.headers or []), ("cheems-error", str(e).encode())]
            self.dead_letters.send_raw(dead_letter(record.topic), record.key, record.value, headers)
            self.stats.dead_lettered += 1
            return
        self.handler(record.topic, key, event)
        self.stats.handled += 1

    def run(self, stop: threading.Event, on_poll: Callable[[], None] | None = None) -> None:
        """Poll until `stop` is set; `on_poll` runs after every poll (a liveness heartbeat)."""
        while not stop.is_set():
            self.poll_once()
            if on_poll is not None:
                on_poll()

    def close(self) -> None:
        self.consumer.close()
        if self._owns_dead_letters:
            self.dead_letters.close(timeout=10)
