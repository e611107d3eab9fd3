"""Evaluator fixtures: a fresh broker per module (with the cheems topics) and a scorer serving a tiny RM."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from trainer.tiny import init_tiny_model


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScorerServer]:
    model = init_tiny_model(tmp_path_factory.mktemp("m") / "tiny", hidden_size=32)
    config = ScorerConfig(model=str(model), backend="torch", host="127.0.0.1", grpc_port=0, http_port=-1)
    with ScorerServer(config) as server:
        yield server
