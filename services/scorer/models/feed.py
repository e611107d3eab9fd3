"""The models topic as the scorer reads it: every partition, from the end, no consumer group.

    feed = ModelFeed("127.0.0.1:9092")       # positions fixed at the topic's end now
    ...                                      # read the registry, load the first model
    for event in feed.poll(500): ...         # cheems.v1.ModelEvent of each registration or step since then

Every scorer replica must see every promotion, so the feed assigns itself all partitions rather
than joining a group (where replicas would split them), and commits nothing. It starts at the end,
fixed when it is made: a model registered after that is polled, one registered before it is in the
registry, which the scorer reads afterwards; nothing falls between. A message that does not decode
is logged and skipped (a group's consumer dead-letters it; a replica's copy would duplicate it).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka.errors import KafkaError

from cheems.v1 import events_pb2
from services.bus.client import CONSUMER_TIMEOUTS
from services.bus.codec import BadMessage, decode
from services.bus.security import connection_kwargs
from services.bus.topics import MODELS
from services.scorer.errors import FeedUnavailable

log = logging.getLogger(__name__)
# how long the broker holds a fetch that finds nothing new: the longest a registration waits to be seen
# (kafka-python's default is 500 ms; ten empty fetches a second per replica cost nothing)
FETCH_WAIT_MS = 100


class ModelFeed:
    def __init__(self, bootstrap: str, topic: str = MODELS, wait_seconds: float = 30.0) -> None:
        """FeedUnavailable when the broker cannot be reached or has no `topic` within `wait_seconds`."""
        from kafka import KafkaConsumer, TopicPartition

        self.topic = topic
        try:
            self.consumer = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=None,
                enable_auto_commit=False,
                fetch_max_wait_ms=FETCH_WAIT_MS,
                request_timeout_ms=CONSUMER_TIMEOUTS["session_timeout_ms"] + 5000,
                **connection_kwargs(),
            )
            partitions = self._partitions(wait_seconds)
            assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
            self.consumer.assign(assigned)
            self.consumer.seek_to_end(*assigned)
            for tp in assigned:
                self.consumer.position(tp)  # resolve "the end" now, not at the first poll
        except KafkaError as e:
            self.close()
            raise FeedUnavailable(f"cannot follow {topic} on the broker at {bootstrap}: {e}") from None
        log.info("following %s (%d partitions) from its end", topic, len(assigned))

    def _partitions(self, wait_seconds: float) -> set[int]:
        end = time.monotonic() + wait_seconds
        while not (partitions := self.consumer.partitions_for_topic(self.topic)):
            if time.monotonic() > end:
                raise FeedUnavailable(f"the broker has no topic {self.topic} (after {wait_seconds:.0f} s)")
            time.sleep(0.2)
        return set(partitions)

    def poll(self, timeout_ms: int = 500) -> list[events_pb2.ModelEvent]:
        """The model events since the last poll: registrations and lifecycle steps (waits up to `timeout_ms`)."""
        batches = self.consumer.poll(timeout_ms=timeout_ms)
        return [e for batch in batches.values() for r in batch if (e := self._event(r)) is not None]

    def _event(self, record: Any) -> events_pb2.ModelEvent | None:
        try:
            event = decode(record.topic, record.value, list(record.headers or []))
        except BadMessage as e:
            log.warning("skipping %s[%d]@%d: %s", record.topic, record.partition, record.offset, e)
            return None
        return event

    def close(self) -> None:
        consumer = getattr(self, "consumer", None)
        if consumer is not None:
            consumer.close()
