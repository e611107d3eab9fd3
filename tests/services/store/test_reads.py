"""services/store/reads.py's `bench_rewards`, on SQLite and PostgreSQL: the rewards a model gave on its newest
finished evaluation, as numpy would sum them up."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import Engine

from services.store import repository
from services.store.db import session_scope
from services.store.reads import bench_rewards


def run_of(engine: Engine, model_id: str, scores: dict[str, dict[str, float]], result: dict | None) -> str:
    """A run of `model_id` holding `scores`, ended with `result` (None: failed; "running": left running)."""
    with session_scope(engine) as session:
        run = repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, len(scores), model_id=model_id)
        for item, values in scores.items():
            repository.record_scores(session, run, item, values)
    with session_scope(engine) as session:
        if result != {"running": True}:
            repository.end_run(session, run, result)
    return run


def test_the_newest_succeeded_run_of_the_model_is_read(engine: Engine) -> None:
    run_of(engine, "m-1", {"open:0": {"a": 9.0, "b": 9.5}}, {"overall": 0.1})  # older: replaced by the next
    newest = run_of(engine, "m-1", {"open:0": {"a": 1.5, "b": -0.5}, "open:1": {"a": 0.25}}, {"overall": 0.2})
    run_of(engine, "m-1", {"open:0": {"a": -7.0}}, None)  # failed afterwards: not a bench figure
    run_of(engine, "m-1", {"open:0": {"a": 40.0}}, {"running": True})  # still running
    run_of(engine, "m-2", {"open:0": {"a": 100.0}}, {"overall": 0.3})  # another model's
    with session_scope(engine) as session:
        found = bench_rewards(session, "m-1")
    values = np.array([1.5, -0.5, 0.25])
    assert found is not None and (found.run_id, found.count) == (newest, 3)
    assert (found.mean, found.std) == pytest.approx((np.mean(values), np.std(values)), abs=1e-12)


def test_a_model_never_evaluated_has_none(engine: Engine) -> None:
    run_of(engine, "m-3", {"open:0": {"a": 1.0}}, None)
    with session_scope(engine) as session:
        assert bench_rewards(session, "m-3") is None and bench_rewards(session, "nobody") is None
