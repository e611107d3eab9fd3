"""Fixtures: a tiny checkpoint, and scorers serving it over real gRPC/HTTP (Triton and torch backends); for
`--follow`, a broker, a store and models registered in it (one module each)."""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from cheems.v1 import training_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.scorer.config import ENV_PREFIX, ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import upgrade
from tests.services.scorer.models.following import expected_scores, register


@pytest.fixture(scope="session", autouse=True)
def no_scorer_environment() -> Iterator[None]:
    """ScorerConfig reads CHEEMS_SCORER_* when built: a stray one in the shell (a token, say) must not
    change these tests, nor the `cheems serve` processes they start."""
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.upper().startswith(ENV_PREFIX)}
    yield
    os.environ.update(saved)


@pytest.fixture(scope="session", autouse=True)
def tokenizers_loaded_once() -> Iterator[None]:
    """Every scorer these tests start loads its checkpoint's tokenizer (`AutoTokenizer.from_pretrained`): ~6 CPU
    seconds each for Qwen's 151k vocabulary, dozens of starts a session. Loaded once per checkpoint (its path,
    the arguments, and `tokenizer_fingerprint`, the hash of its tokenizer files: files changed in place load
    again) and handed out as a deep copy (~0.6 s), so no two scorers share a tokenizer object, as loading gives.
    A load that fails is never remembered: it fails again, for real, each time."""
    from transformers import AutoTokenizer

    from services.scorer.models.loading import tokenizer_fingerprint

    real = AutoTokenizer.from_pretrained
    loaded: dict[tuple[Any, ...], Any] = {}
    lock = threading.Lock()

    def from_pretrained(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not Path(path).is_dir():
            return real(path, *args, **kwargs)
        key = (str(path), tokenizer_fingerprint(str(path)), args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return real(path, *args, **kwargs)
        with lock:
            if key not in loaded:
                loaded[key] = real(path, *args, **kwargs)
            return copy.deepcopy(loaded[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AutoTokenizer, "from_pretrained", staticmethod(from_pretrained))
        yield


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=1)


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
    yield from running(tiny_model, backend="triton", max_message_bytes=64 * 1024 * 1024)  # the big-body tests


@pytest.fixture(scope="session")
def strict_server(tiny_model: Path) -> Iterator[ScorerServer]:
    """In-process torch backend with tight limits and a bearer token."""
    yield from running(tiny_model, backend="torch", max_responses=3, max_length=48, token="s3cret-Q7vK2mN9xR4tW8yB6pL3")


@pytest.fixture(scope="session")
def truncating_server(tiny_model: Path) -> Iterator[ScorerServer]:
    yield from running(
        tiny_model, backend="torch", max_length=48, truncation="left", max_message_bytes=64 * 1024 * 1024
    )


# --- `cheems serve --follow`


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


@pytest.fixture(scope="session")
def checkpoints(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Callable[..., Path]
) -> dict[str, Path]:
    """Two tiny models of different seeds, and a directory that is no model."""
    root = tmp_path_factory.mktemp("follow")
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{不是 JSON", encoding="utf-8")
    two = tiny_checkpoint(hidden_size=32, layers=2, seed=2, name="two")
    return {"one": tiny_model, "two": two, "broken": broken}


@pytest.fixture(scope="session")
def expected(checkpoints: dict[str, Path]) -> dict[str, list[list[float]]]:
    """Scores by checkpoint name, computed before any scorer runs."""
    return expected_scores({name: checkpoints[name] for name in ("one", "two")})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Engine]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    yield url, engine
    engine.dispose()


@pytest.fixture(scope="module")
def first(store: tuple[str, Engine], checkpoints: dict[str, Path]) -> training_pb2.Model:
    return register(store[1], checkpoints["one"])
