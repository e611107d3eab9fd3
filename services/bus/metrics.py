"""What the process's consumers say on `/metrics`: lag per topic, partition and group, and dead letters.

    watch_consumers(registry)     # once per process that consumes: every EventConsumer it makes is reported

`cheems_bus_consumer_lag{topic,partition,group}` is the records on the broker that the group has not consumed
yet: the partition's high watermark (learnt from the last fetch) less the consumer's position, measured by the
consumer's own thread after each poll (a KafkaConsumer is not safe to touch from the scraping thread), so the
scrape reads numbers only. `cheems_bus_dead_letters_total{topic,group}` counts the records copied to
`<topic>.dlq` because they did not decode. A consumer is reported from its creation until it is closed.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any, Protocol

from kafka import TopicPartition
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Lag = dict[tuple[str, int], int]  # (topic, partition) -> records behind


class Reported(Protocol):
    group: str
    lag: Lag
    dead_letters_by_topic: dict[str, int]


_CONSUMERS: weakref.WeakSet[Any] = weakref.WeakSet()


def report(consumer: Reported) -> None:
    _CONSUMERS.add(consumer)


def forget(consumer: Reported) -> None:
    _CONSUMERS.discard(consumer)


def consumer_lag(consumer: Any) -> Lag:
    """Each assigned partition's lag, where both ends are known (the consumer's thread only)."""
    lag: Lag = {}
    try:
        assigned: set[TopicPartition] = consumer.assignment() or set()
        for tp in assigned:
            end = consumer.highwater(tp)
            position = consumer.position(tp, timeout_ms=0) if end is not None else None
            if end is not None and position is not None:
                lag[(tp.topic, tp.partition)] = max(0, end - position)
    except (KafkaError, AssertionError):  # a rebalance meanwhile: the next poll measures again
        return {}
    return lag


class ConsumerMetrics(Collector):
    """The lag and dead letters of every consumer of this process that is open now."""

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "cheems_bus_consumer_lag",
            "Records on the broker the consumer group has not consumed yet (high watermark - position)",
            labels=["topic", "partition", "group"],
        )
        dead = CounterMetricFamily(
            "cheems_bus_dead_letters",
            "Records that did not decode, copied to <topic>.dlq and skipped",
            labels=["topic", "group"],
        )
        for consumer in list(_CONSUMERS):
            for (topic, partition), behind in sorted(dict(consumer.lag).items()):
                lag.add_metric([topic, str(partition), consumer.group], behind)
            for topic, count in sorted(dict(consumer.dead_letters_by_topic).items()):
                dead.add_metric([topic, consumer.group], count)
        yield lag
        yield dead


def watch_consumers(registry: CollectorRegistry) -> None:
    """Report this process's consumers in `registry`."""
    registry.register(ConsumerMetrics())
