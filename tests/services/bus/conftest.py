"""The bus tests' broker: one embedded broker per test module with every topic and its dead letters (a module
that needs other topics defines its own `broker`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.bus import topics
from services.bus.broker import EmbeddedBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running
