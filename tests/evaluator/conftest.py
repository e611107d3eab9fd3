"""Evaluator fixtures: a broker per module (with the cheems topics) or per test, one tiny RM checkpoint per session,
scorers serving it under a model id of the test's choosing, and `pump` (consumers polled in threads of their own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from trainer.tiny import init_tiny_model


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
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_tiny_model(tmp_path_factory.mktemp("m") / "tiny", hidden_size=32)


def serving(checkpoint: Path, model_id: str, port: int = 0) -> ScorerServer:
    """A scorer (torch backend, gRPC only) of `checkpoint` served as `model_id`: a link of that name to it
    (a scorer names its model after the checkpoint directory); start it, or use it as a context manager."""
    link = checkpoint.parent / model_id
    if not link.exists():
        link.symlink_to(checkpoint, target_is_directory=True)
    return ScorerServer(ScorerConfig(model=str(link), backend="torch", host="127.0.0.1", grpc_port=port, http_port=-1))


@pytest.fixture(scope="module")
def scorer(checkpoint: Path) -> Iterator[ScorerServer]:
    with serving(checkpoint, "tiny") as server:
        yield server


class Pump:
    """Consumers each polled by a thread of its own, so their group joins overlap; `wait_for` re-raises what
    a consumer's thread raised."""

    def __init__(self, consumers: tuple[EventConsumer, ...]) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in consumers]

    def _run(self, consumer: EventConsumer) -> None:
        try:
            consumer.run(self.stop)
        except BaseException as e:
            self.errors.append(e)

    def wait_for(self, predicate: Callable[[], object], timeout: float = 120.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.errors:
                raise self.errors[0]
            assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
            time.sleep(0.1)


@pytest.fixture
def pump() -> Callable[..., object]:
    """`with pump(consumer, ...) as p: p.wait_for(...)`: the consumers are polled until the block ends."""

    @contextmanager
    def pumping(*consumers: EventConsumer) -> Iterator[Pump]:
        running = Pump(consumers)
        for thread in running.threads:
            thread.start()
        try:
            yield running
        finally:
            running.stop.set()
            for thread in running.threads:
                thread.join(timeout=30)

    return pumping
