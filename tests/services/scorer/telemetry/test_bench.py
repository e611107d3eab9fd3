"""services/scorer/telemetry/bench.py: a model's bench figures read from a real store, kept a while, and a store
that fails answers none (logged) instead of failing the scrape."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.scorer.telemetry.bench import BenchCache, store_bench
from services.store import repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.reads import BenchRewards


def test_the_store_is_read_once_per_ttl_and_a_model_evaluated_later_shows_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cheems.db'}"
    upgrade(url)
    now = [100.0]
    asked: list[str] = []
    lookup = store_bench(url)

    def counted(model_id: str) -> BenchRewards | None:
        asked.append(model_id)
        return lookup(model_id)

    cache = BenchCache(counted, ttl=60, clock=lambda: now[0])
    assert cache("m-1") is None  # not evaluated yet
    engine = create_engine_for(StoreConfig(url))
    with session_scope(engine) as session:
        run = repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, 1, model_id="m-1")
        repository.record_scores(session, run, "open:0", {"a": 2.0, "b": 0.0})
        repository.end_run(session, run, {"overall": 1.0})
    engine.dispose()
    now[0] += 59
    assert cache("m-1") is None and asked == ["m-1"]  # kept: the store is not asked at every scrape
    now[0] += 2
    assert cache("m-1") == BenchRewards(run, 2, 1.0, 1.0) and asked == ["m-1", "m-1"]


def test_a_store_that_fails_gives_no_figures_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    def broken(model_id: str) -> BenchRewards | None:
        raise OSError("database is locked\nwith a second line")

    cache = BenchCache(broken)
    assert cache("m-1") is None
    assert "the bench rewards of m-1 could not be read from the store: database is locked" in caplog.text
    assert "second line" not in caplog.text
