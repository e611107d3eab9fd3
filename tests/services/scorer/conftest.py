"""Fixtures: a tiny checkpoint, and scorers serving it over real gRPC/HTTP (Triton and torch backends)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from trainer.tiny import init_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_tiny_model(tmp_path_factory.mktemp("scorer-model") / "tiny", hidden_size=32, layers=2, seed=1)


def running(model: Path, **changes: object) -> Iterator[ScorerServer]:
    config = ScorerConfig(model=str(model), host="127.0.0.1", grpc_port=0, http_port=0, **changes)  # type: ignore[arg-type]
    server = ScorerServer(config).start()
    try:
        yield server
    finally:
        server.stop(grace=1)


@pytest.fixture(scope="session")
def triton_server(tiny_model: Path) -> Iterator[ScorerServer]:
    """The production path: gRPC front -> tritonclient -> Triton (started by PyTriton) -> RM."""
    yield from running(tiny_model, backend="triton")


@pytest.fixture(scope="session")
def strict_server(tiny_model: Path) -> Iterator[ScorerServer]:
    """In-process torch backend with tight limits and a bearer token."""
    yield from running(tiny_model, backend="torch", max_responses=3, max_length=48, auth_token="s3cret")


@pytest.fixture(scope="session")
def truncating_server(tiny_model: Path) -> Iterator[ScorerServer]:
    yield from running(tiny_model, backend="torch", max_length=48, truncation="left")
