"""Reading a topic whole, from its first retained event, without joining a consumer group (nothing committed,
no rebalance to wait for): what an audit or a test reads to see what was published.

    events = read_topic("127.0.0.1:9092", "cheems.samples.v1")                       # up to the end offsets now
    events = read_topic(bootstrap, topic, done=lambda found: len(found) >= 10)       # and until 10 arrived
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.bus.client import Delivery
from services.bus.codec import decode
from services.bus.security import KafkaSecurity, connection_kwargs


def read_topic(
    bootstrap: str,
    topic: str,
    done: Callable[[list[Delivery]], bool] = lambda found: True,
    timeout: float = 30.0,
    security: KafkaSecurity | None = None,
) -> list[Delivery]:
    """Every event of `topic`, oldest first per partition, read until the partitions' end offsets are reached and
    `done(found)` holds; TimeoutError, saying how many were read, past `timeout` seconds."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", **connection_kwargs(security))  # fmt: skip
    try:
        consumer.topics()  # metadata: the topic's partitions are known after this
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        for partition in partitions:  # offset 0, or the first retained (out of range: reset to earliest)
            consumer.seek(partition, 0)
        found: list[Delivery] = []
        deadline = time.monotonic() + timeout
        while True:
            # the end is the high watermark each fetch reports, not ListOffsets: the embedded broker on disk
            # answers "latest" from the newest object's first offset, short of a batch's later records
            ends = [consumer.highwater(p) for p in partitions]
            at_end = all(e is not None and consumer.position(p) >= e for p, e in zip(partitions, ends, strict=True))
            if at_end and done(found):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(found)} events read within {timeout:.0f} s, not all that was wanted")
            for records in consumer.poll(timeout_ms=200).values():
                found += [Delivery(r.topic, r.key.decode(errors="replace") if r.key else "",
                                   decode(r.topic, r.value, list(r.headers or []))) for r in records]  # fmt: skip
    finally:
        consumer.close()
