"""`cheems eval --via-kafka`: one run through Kafka driven to completion inside this process.

    result = run_via_kafka(["open.jsonl", "human.jsonl"], "localhost:50051", "sqlite:///cheems.db")
    result = evaluate_via_kafka(bench, scorer_url, "HOST:9092", engine, EvalOptions(ece_bins=10))

`evaluate_via_kafka` starts a run, then polls a score worker and the result sink in turn (a
progress bar on stderr) until the sink has stored the metrics, and returns what it stored. The
bench files are read once: the run and the sink share one cache. `run_via_kafka` first migrates
the database and, without a bootstrap address, starts an embedded broker for the run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack

from sqlalchemy.engine import Engine

from cheems.errors import DeadlineExceeded
from evaluator.errors import RunFailed
from evaluator.evaluate import DEFAULT_OPTIONS, BenchCache, EvalOptions
from evaluator.metrics import EvalResult
from evaluator.runs import run_message, run_state, start_run, stored_result
from evaluator.sink import ResultSink
from evaluator.worker import ScoreWorker
from services.bus.client import EventConsumer, Publisher


def evaluate_via_kafka(
    bench: Sequence[str],
    scorer_url: str,
    bootstrap: str,
    engine: Engine,
    options: EvalOptions = DEFAULT_OPTIONS,
    timeout: float = 3600.0,
    progress: bool = True,
) -> EvalResult:
    """Start a run and drive a score worker and the sink until it completes; the metrics the sink stored."""
    cache = BenchCache()
    with ExitStack() as stack:
        publisher = Publisher(bootstrap)
        stack.callback(publisher.close)
        run_id = start_run(engine, publisher, bench, scorer_url, options, cache)
        worker = ScoreWorker(bootstrap, scorer_url)
        stack.callback(worker.close)
        sink = ResultSink(bootstrap, engine, cache=cache)
        stack.callback(sink.close)
        wait_for_run(engine, run_id, [worker.consumer, sink.consumer], timeout, progress)
    result = stored_result(engine, run_id)
    assert result is not None  # wait_for_run returns once the run succeeded
    return result


def wait_for_run(
    engine: Engine, run_id: str, consumers: Sequence[EventConsumer], timeout: float, progress: bool
) -> None:
    """Poll `consumers` in turn until the run succeeded; RunFailed if it failed, DeadlineExceeded after `timeout` s."""
    from tqdm import tqdm

    deadline = time.monotonic() + timeout
    with tqdm(total=run_state(engine, run_id).total, desc="eval via kafka", unit="prompt", disable=not progress) as bar:
        while (state := run_state(engine, run_id)).state != "succeeded":
            if state.state == "failed":
                raise RunFailed(f"run {run_id} failed: {run_message(engine, run_id).error}")
            if time.monotonic() > deadline:
                raise DeadlineExceeded(
                    f"run {run_id} not complete after {timeout} s: {state.scored}/{state.total} scored"
                )
            for consumer in consumers:
                consumer.poll_once(200)
            bar.update(state.scored - bar.n)
        bar.update(state.total - bar.n)


def run_via_kafka(
    bench: Sequence[str],
    scorer_url: str,
    db: str,
    bootstrap: str = "",
    options: EvalOptions = DEFAULT_OPTIONS,
    progress: bool = True,
) -> EvalResult:
    """Migrate `db`, start an embedded broker unless `bootstrap` names one, and evaluate through it."""
    from services.bus import topics
    from services.bus.broker import EmbeddedBroker
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    with ExitStack() as stack:
        if not bootstrap:
            broker = stack.enter_context(EmbeddedBroker())
            broker.create_topics(topics.with_dead_letters())
            bootstrap = broker.bootstrap
        engine = create_engine_for(StoreConfig(db))
        stack.callback(engine.dispose)
        return evaluate_via_kafka(bench, scorer_url, bootstrap, engine, options, progress=progress)
