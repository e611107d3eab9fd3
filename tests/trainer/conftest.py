"""Shared trainer fixtures: the real Qwen2-vocabulary tokenizer (built once per session, ~3-4 s), a broker per
module with the cheems topics, a tiny RM per module, and `read_events`: every event a topic holds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.codec import decode


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    from trainer.tiny import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Callable[..., Path]) -> Path:
    """`init_tiny_model(dir, hidden_size=32, layers=2, seed=1)`, shared by the session (read-only)."""
    return tiny_checkpoint(hidden_size=32, layers=2, seed=1)


def read_events(bootstrap: str, topic: str, want: int = 1, timeout: float = 30.0, idle: float = 2.0) -> list[Any]:
    """Every event on `topic` from the beginning: at least `want`, then until `idle` seconds bring nothing new."""
    from kafka import KafkaConsumer

    reader = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"read-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    events: list[Any] = []
    deadline, last = time.monotonic() + timeout, time.monotonic()
    try:
        while time.monotonic() < deadline and (len(events) < want or time.monotonic() - last < idle):
            records = [r for batch in reader.poll(timeout_ms=500).values() for r in batch]
            events += [decode(r.topic, r.value, list(r.headers or [])) for r in records]
            if records:
                last = time.monotonic()
    finally:
        reader.close()
    return events


SAMPLE_OPEN = Path(__file__).resolve().parents[2] / "data" / "sample" / "open.jsonl"
SAMPLE_HUMAN = Path(__file__).resolve().parents[2] / "data" / "sample" / "human.jsonl"


def seed_sample(engine: Any, start: int, count: int, kind: str = "human") -> list[str]:
    """Store sample prompts [start, start + count) with one annotation each (the gold order) and a ranking."""
    from cheems.formats.cheemsbench import read_bench
    from services.store import repository
    from services.store.db import session_scope

    ids = []
    with session_scope(engine) as s:
        for item in read_bench(SAMPLE_OPEN)[start : start + count]:
            pid, _ = repository.add_sample(s, item.input, [(r.id, r.content) for r in item.responses], item.category)
            order = [[r for r in item.rank if item.rank[r] == level] for level in sorted(set(item.rank.values()))]
            repository.add_annotation(s, f"{kind}-{pid[:12]}", pid, kind, kind, {"order": order})
            repository.save_ranking(s, pid, dict(item.rank), 0, 0)
            ids.append(pid)
    return ids
