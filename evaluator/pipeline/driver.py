"""`cheems eval --via-kafka`: one run through Kafka driven to completion inside this process.

    result = run_via_kafka(["open.jsonl", "human.jsonl"], "localhost:50051", "sqlite:///cheems.db")
    result = evaluate_via_kafka(bench, scorer_url, "HOST:9092", engine, EvalOptions(ece_bins=10))

`evaluate_via_kafka` makes a score worker and the result sink, each polled by a thread of its own
(their group joins overlap, and neither waits while the other handles a batch), starts a run, and
waits (a progress bar on stderr) until the sink has stored the metrics; it returns what it stored.
The bench files are read once: the run and the sink share one cache. `run_via_kafka` first migrates
the database and, without a bootstrap address, starts an embedded broker for the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from sqlalchemy.engine import Engine

from cheems.errors import DeadlineExceeded
from evaluator.errors import RunFailed
from evaluator.evaluate import DEFAULT_OPTIONS, BenchCache, EvalOptions
from evaluator.metrics import EvalResult
from evaluator.pipeline.runs import run_message, run_state, start_run, stored_result
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker
from services.bus.client import EventConsumer, Publisher

WATCH_S = 0.05  # how often the waiting thread looks at the run's state


def evaluate_via_kafka(
    bench: Sequence[str],
    scorer_url: str,
    bootstrap: str,
    engine: Engine,
    options: EvalOptions = DEFAULT_OPTIONS,
    timeout: float = 3600.0,
    progress: bool = True,
    token: str = "",
) -> EvalResult:
    """Start a run and drive a score worker and the sink until it completes; the metrics the sink stored.
    `token`: the bearer token the worker scores with (an account's, or the scorer's own)."""
    cache = BenchCache()
    with ExitStack() as stack:
        publisher = Publisher(bootstrap)
        stack.callback(publisher.close)
        worker = ScoreWorker(bootstrap, scorer_url, token)
        stack.callback(worker.close)
        sink = ResultSink(bootstrap, engine, cache=cache)
        stack.callback(sink.close)
        polling = stack.enter_context(polled([worker.consumer, sink.consumer]))  # they join while the run starts
        run_id = start_run(engine, publisher, bench, scorer_url, options, cache)
        watch_run(engine, run_id, polling, timeout, progress)
    result = stored_result(engine, run_id)
    assert result is not None  # watch_run returns once the run succeeded
    return result


class Polling:
    """Consumers each polled by a thread of its own until `stop` is set; `check` re-raises what one raised."""

    def __init__(self, consumers: Sequence[EventConsumer], timeout_ms: int = 100) -> None:
        self.stop, self.errors = threading.Event(), list[BaseException]()
        self.threads = [threading.Thread(target=self._poll, args=(c, timeout_ms), daemon=True) for c in consumers]

    def _poll(self, consumer: EventConsumer, timeout_ms: int) -> None:
        try:
            while not self.stop.is_set():
                consumer.poll_once(timeout_ms)
        except BaseException as e:  # handed to the waiting thread by `check`
            self.errors.append(e)
            self.stop.set()

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]


@contextmanager
def polled(consumers: Sequence[EventConsumer]) -> Iterator[Polling]:
    """`consumers` polled in threads of their own until the block ends."""
    polling = Polling(consumers)
    for thread in polling.threads:
        thread.start()
    try:
        yield polling
    finally:
        polling.stop.set()
        for thread in polling.threads:
            thread.join(timeout=60)


def wait_for_run(
    engine: Engine, run_id: str, consumers: Sequence[EventConsumer], timeout: float, progress: bool
) -> None:
    """Poll `consumers`, each in a thread of its own, until the run succeeded (re-raising what one raises);
    RunFailed if the run failed, DeadlineExceeded after `timeout` s."""
    with polled(consumers) as polling:
        watch_run(engine, run_id, polling, timeout, progress)


def watch_run(engine: Engine, run_id: str, polling: Polling, timeout: float, progress: bool) -> None:
    """Wait until the run succeeded while `polling` polls its consumers, as `wait_for_run` does."""
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
            polling.check()
            bar.update(state.scored - bar.n)
            time.sleep(WATCH_S)
        bar.update(state.total - bar.n)


def run_via_kafka(
    bench: Sequence[str],
    scorer_url: str,
    db: str,
    bootstrap: str = "",
    options: EvalOptions = DEFAULT_OPTIONS,
    progress: bool = True,
    token: str = "",
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
        return evaluate_via_kafka(bench, scorer_url, bootstrap, engine, options, progress=progress, token=token)
