"""The outbox relay: publishes the events a store queued with its changes, oldest first, then deletes them.

    relay = EventRelay(StoreOutbox(engine), Publisher(bootstrap, connect=False)).start()   # a background thread
    relay.kick()      # after a commit: publish now rather than at the next sweep
    relay.stop()      # one last try; what fails waits for the next start

Each round claims the outbox (one relay per database at a time, so one key's events keep their commit
order), reads a batch in a short transaction, publishes it and waits for the broker's acknowledgements with
no transaction open, then deletes it in another short transaction. Delivery is at-least-once: a relay that
dies between the acknowledgement and the delete sends the same events (same `header.event_id`) again, and
consumers deduplicate. A broker outage delays events and never loses them; after a failed round the
producer is renewed (`Publisher.renew`), since a Kafka producer that lost its broker can stay failed.
The outbox is anything with `claim`, `take` and `remove` (`services.store.outbox.StoreOutbox`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.message import Message
from kafka.errors import KafkaError

from cheems import errors
from services.bus import topics
from services.bus.client import Publisher
from services.observe import tracing

log = logging.getLogger(__name__)


class RelayError(errors.Unavailable):
    """The broker did not take the waiting events (they stay in the outbox for the next try)."""


class Pending(Protocol):
    """A waiting event: its place in the outbox and what to publish."""

    @property
    def id(self) -> int: ...
    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> bytes: ...
    @property
    def trace_context(self) -> dict[str, str]:
        """The W3C trace context the change was made in ({} untraced): the event is sent as its child."""
        ...


class Outbox(Protocol):
    def claim(self) -> contextlib.AbstractContextManager[bool]:
        """The relay lock for the block: True when held by this relay, False while another one holds it."""
        ...

    def take(self, limit: int) -> Sequence[Pending]:
        """Up to `limit` waiting events, oldest first."""
        ...

    def remove(self, ids: Sequence[int]) -> None:
        """Delete published events."""
        ...


@dataclass(frozen=True)
class RelayConfig:
    """sweep_every: seconds between looks for events nobody kicked for (a crashed process's, an outage's);
    batch: events taken per round; ack_timeout: seconds the broker has to acknowledge a batch;
    max_backoff: the longest pause between tries while the broker fails."""

    sweep_every: float = 2.0
    batch: int = 256
    ack_timeout: float = 10.0
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        for name in ("sweep_every", "ack_timeout", "max_backoff"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RelayConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.batch < 1:
            raise ValueError(f"RelayConfig.batch must be >= 1, got {self.batch}")


class EventRelay:
    """Publishes the outbox: at once when kicked, every `sweep_every` seconds anyway, backing off on failure."""

    def __init__(self, outbox: Outbox, publisher: Publisher, config: RelayConfig = RelayConfig()) -> None:
        self.outbox, self.publisher, self.config = outbox, publisher, config
        self.published = 0
        self._wake, self._stop, self._lock = threading.Event(), threading.Event(), threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> EventRelay:
        self._wake.set()  # first publish what a previous process left
        self._thread = threading.Thread(target=self._loop, name="event-relay", daemon=True)
        self._thread.start()
        return self

    def kick(self) -> None:
        self._wake.set()

    def drain(self) -> int:
        """Publish every waiting event, oldest first; returns how many (0 while another relay holds the
        outbox: it publishes them). RelayError leaves the rest waiting."""
        total = 0
        with self._lock:
            while (sent := self._publish_batch()) > 0:
                total += sent
        return total

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, then try once more to publish what waits (what fails is sent by the next start)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.drain()
        except Exception as e:
            log.warning("stopping with events unpublished (the next start sends them): %s", e)

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            if backoff:
                self._stop.wait(backoff)  # a failing broker: kicks do not hurry the next try
            else:
                self._wake.wait(self.config.sweep_every)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.drain()
                backoff = 0.0
            except Exception as e:
                backoff = min(max(2 * backoff, 0.5), self.config.max_backoff)
                log.warning("events wait in the outbox (%s); next try in %.1f s", e, backoff)

    def _publish_batch(self) -> int:
        with self.outbox.claim() as mine:
            rows = self.outbox.take(self.config.batch) if mine else []  # a short transaction, ended here
            if not rows:
                return 0
            self._send(rows)  # no transaction open while the broker is waited for
            self.outbox.remove([row.id for row in rows])  # then another short one
        self.published += len(rows)
        return len(rows)

    def _send(self, events: Sequence[Pending]) -> None:
        try:
            sent = [self.publisher.publish(e.topic, e.key, _decoded(e), _context(e)) for e in events]
            self.publisher.confirm(sent, timeout=self.config.ack_timeout)  # flushed now, not after linger_ms
        except KafkaError as e:
            self.publisher.renew()  # before the claim ends: nothing of this batch reaches the broker later
            raise RelayError(f"the broker did not acknowledge {len(events)} events: {e!r}") from None


def _decoded(event: Pending) -> Message:
    return topics.PAYLOADS[event.topic].FromString(event.value)


def _context(event: Pending) -> Any:
    """The trace context the event was queued in: its send span's parent."""
    return tracing.extract([(k, v.encode()) for k, v in event.trace_context.items()])
