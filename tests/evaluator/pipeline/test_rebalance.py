"""A rebalance in the middle of a slow batch loses no score and stores none twice (real broker, scorer and sink).

The scorer holds every call 1.5 s (a large RM on a busy GPU), so one worker's batch of a run's 36 requests, nine
ScoreBatch calls, takes longer than the group's `max_poll_interval_ms` (10 s). Midway, a second worker joins the
group: the partitions are reassigned while the first one is still scoring. The first worker stays a member (it
polls with its partitions paused between calls); whatever it scored of partitions it lost may be scored again by
the second worker (at-least-once), and the sink stores each item once: the run ends with exactly one score per item.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from evaluator.pipeline.runs import run_state, start_run
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker, WorkerConfig
from services.bus.broker import EmbeddedBroker
from services.bus.client import CONSUMER_TIMEOUTS, Publisher
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import EvalScore

pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
BENCH = [str(SAMPLE / "open.jsonl"), str(SAMPLE / "human.jsonl")]
CALL_SECONDS = 1.5


class SlowBackend:
    """Scores a sequence by its length, each call held CALL_SECONDS: slow enough to outlast the poll interval."""

    name = "slow"
    prefix_sharing = False

    def __init__(self) -> None:
        self.calls = 0

    def ready(self) -> bool:
        return True

    def score(self, sequences: Sequence[Sequence[int]], deadline: object = None) -> list[float]:
        self.calls += 1
        time.sleep(CALL_SECONDS)
        return [float(len(s)) for s in sequences]

    def close(self) -> None:
        pass


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    yield engine
    engine.dispose()


def test_a_rebalance_during_a_slow_batch_neither_loses_nor_doubles_scores(
    fresh_broker: EmbeddedBroker, checkpoint: Path, db: Engine, pump: Callable[..., Any]
) -> None:
    backend = SlowBackend()
    config = ScorerConfig(model=str(checkpoint), backend="torch", host="127.0.0.1", grpc_port=0, http_port=-1)
    group = f"workers-{uuid.uuid4().hex[:8]}"
    one_call_each = WorkerConfig(batch_size=64, call_items=4, calls_in_flight=1)
    with ScorerServer(config, backend=backend) as scorer:
        url = f"127.0.0.1:{scorer.grpc_port}"
        publisher = Publisher(fresh_broker.bootstrap)
        run_id = start_run(db, publisher, BENCH, url)
        first = ScoreWorker(fresh_broker.bootstrap, url, group=group, config=one_call_each)
        second = ScoreWorker(fresh_broker.bootstrap, url, group=group, config=one_call_each)
        sink = ResultSink(fresh_broker.bootstrap, db, group=f"sink-{group}")
        try:
            with pump(first.consumer, sink.consumer) as running:
                running.wait_for(lambda: run_state(db, run_id).scored >= 4, what="the first worker's first scores")
                with pump(second.consumer) as joined:  # joins mid-batch: the group rebalances
                    joined.wait_for(lambda: run_state(db, run_id).state == "succeeded", timeout=240, what="the run")
                    running.polling.check()
        finally:
            for closing in (first, second, sink):
                closing.close()
            publisher.close()
    state = run_state(db, run_id)
    assert (state.state, state.scored, state.total) == ("succeeded", 36, 36)
    with session_scope(db) as session:
        rows = session.scalar(select(func.count()).select_from(EvalScore).where(EvalScore.run_id == run_id))
        items = session.scalar(select(func.count(func.distinct(EvalScore.item))).where(EvalScore.run_id == run_id))
    assert rows == items == 36, "a score lost, or one item stored twice"
    # the partitions were shared out after the join, and the first worker's calls outlasted the poll interval
    assert first.consumer.stats.handled > 0 and second.consumer.stats.handled > 0
    assert backend.calls * CALL_SECONDS * 1000 > CONSUMER_TIMEOUTS["max_poll_interval_ms"]
