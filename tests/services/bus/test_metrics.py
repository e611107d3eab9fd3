"""A consumer's lag and dead letters on `/metrics`, against the real embedded broker: the lag is what the group has
not consumed (one record a poll: it falls by one each poll, to 0), a record that does not decode counts once under
its topic and group, and a closed consumer is no longer reported."""

from __future__ import annotations

import time
import urllib.request
import uuid

from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.bus.metrics import watch_consumers
from services.observe.metrics import new_registry, serve_metrics
from tests.services.observe.scrape import promtool_problems, sample_value, scrape, series

KEY = "one-partition"  # every record under one key: one partition, so the lag of that partition says it all


def sample_event(n: int) -> events_pb2.SampleEvent:
    return events_pb2.SampleEvent(sample=common_pb2.Sample(prompt_id=f"p{n}", prompt=f"第{n}题"))


def test_lag_falls_as_the_group_consumes_and_dead_letters_are_counted(broker: EmbeddedBroker) -> None:
    group = f"lag-{uuid.uuid4().hex[:8]}"
    publisher = Publisher(broker.bootstrap)
    sent = [publisher.publish(topics.SAMPLES, KEY, sample_event(n)) for n in range(3)]
    sent.append(publisher.send_raw(topics.SAMPLES, KEY.encode(), b"\x00not an event", []))
    publisher.confirm(sent, timeout=30)
    publisher.close()
    registry = new_registry()
    watch_consumers(registry)
    exporter = serve_metrics(registry, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{exporter.port}/metrics"
    consumer = EventConsumer(broker.bootstrap, [topics.SAMPLES], group, lambda *_: None, max_poll_records=1)
    try:
        lags: list[float] = []
        deadline = time.monotonic() + 60
        while consumer.stats.handled + consumer.stats.dead_lettered < 4 and time.monotonic() < deadline:
            if consumer.poll_once():
                now = scrape(url)
                mine = [s for s in series(now, "cheems_bus_consumer_lag") if s["group"] == group]
                lags.append(sum(sample_value(now, "cheems_bus_consumer_lag", s) for s in mine))
        families = scrape(url)
        text = urllib_text(url)
    finally:
        consumer.close()
    assert lags == [3, 2, 1, 0]  # one record a poll (the module's broker holds these four only)
    dead = {"topic": topics.SAMPLES, "group": group}
    assert sample_value(families, "cheems_bus_dead_letters_total", dead) == 1
    assert promtool_problems(text) == ""
    after_close = scrape(url)
    exporter.close()
    assert not [s for s in series(after_close, "cheems_bus_consumer_lag") if s["group"] == group]


def urllib_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())
