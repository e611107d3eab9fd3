"""Evaluator fixtures: a broker per module (with the cheems topics) or per test, one tiny RM checkpoint per session,
scorers serving it under a model id of the test's choosing, and `pump` (consumers polled in threads of their own)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from evaluator.pipeline.driver import Polling, polled
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


@pytest.fixture
def fresh_broker() -> Iterator[EmbeddedBroker]:
    """A broker of the test's own: no other test's events on it (starts in well under a second)."""
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


@pytest.fixture(scope="session")
def checkpoint(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, seed=0)


def serving(checkpoint: Path, model_id: str, port: int = 0) -> ScorerServer:
    """A scorer (torch backend, gRPC only) of `checkpoint` served as `model_id`: a link of that name to it
    (a scorer names its model after the checkpoint directory); start it, or use it as a context manager."""
    link = checkpoint.parent / model_id
    with suppress(FileExistsError):  # made already, here or by another xdist worker (tiny_checkpoint)
        link.symlink_to(checkpoint, target_is_directory=True)
    return ScorerServer(ScorerConfig(model=str(link), backend="torch", host="127.0.0.1", grpc_port=port, http_port=-1))


@pytest.fixture(scope="module")
def scorer(checkpoint: Path) -> Iterator[ScorerServer]:
    with serving(checkpoint, "tiny") as server:
        yield server


class Pump:
    """Waits on consumers polled by `evaluator.pipeline.driver.polled` (a thread each, so their group joins overlap);
    `wait_for` re-raises what a consumer's thread raised."""

    def __init__(self, polling: Polling) -> None:
        self.polling = polling

    def wait_for(self, predicate: Callable[[], object], timeout: float = 120.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self.polling.check()
            assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
            time.sleep(0.1)


@contextmanager
def pumping(*consumers: EventConsumer) -> Iterator[Pump]:
    """The consumers polled until the block ends."""
    with polled(consumers) as polling:
        yield Pump(polling)


@pytest.fixture
def pump() -> Callable[..., object]:
    """`with pump(consumer, ...) as p: p.wait_for(...)`: the consumers are polled until the block ends."""
    return pumping
