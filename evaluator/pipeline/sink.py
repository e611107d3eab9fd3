"""The result sink: scores from Kafka -> eval_scores; a run whose every item is scored -> its metrics.

    sink = ResultSink("localhost:9092", engine, SinkConfig(batch_size=512))
    sink.consumer.poll_once()   # or run it as a process: `cheems service eval-sink` (evaluator.pipeline.process)

A polled batch of scores (up to `SinkConfig.batch_size`) is stored in one transaction, then each run
it touched is checked for completion once, then its offsets are committed. Storing a score is
idempotent (keyed by run and item), so a redelivered score is a no-op and the sink can be killed and
restarted at any point: the run still ends with the same metrics. Once complete, the metrics are
computed with the run's own options (`evaluator.evaluate.evaluate`) and stored on the run, its EvalResultEvent
queued in the store's outbox in the same transaction (`evaluator.pipeline.runs.end_run`; a failed run's too). The
sink runs the relay of `topics.RELAYED_BY["eval-sink"]` (a thread: `services.bus.relay`), which publishes them
to cheems.eval-results.v1 after the commit: a broker outage delays a result's event and never loses it (the
promotion gate waits on it). A run that cannot be finished (its bench file changed or broke since
StartRun, metrics the database refuses) is marked failed with the reason, which GetRun reports, and
the sink goes on with the other runs.

A run of a registered model stores only the scores of that model (the ScoreEvent's `model_id`);
scores from another model are logged and dropped, so a run never mixes models. A ScoreEvent with
`error` (a worker gave up on the run's request), or whose ids and scores do not pair up, fails the
run with the reason. A batch the database refuses as a whole is stored one score at a time, and a
score it still refuses fails its run: one bad score never holds up the others. Only a database that
cannot be reached raises (nothing is committed; the batch is redelivered).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from cheems.errors import CheemsError
from evaluator.evaluate import BenchCache, EvalOptions, evaluate, load_subsets
from evaluator.metrics import EvalResult, Semantics
from evaluator.pipeline.runs import end_run, fail_run, rewards_of
from evaluator.pipeline.sink_batch import Dropped, ScoreRow, accept, only_run, plan_batch, runs_of
from evaluator.report import to_json
from services.bus import topics
from services.bus.client import Delivery, EventConsumer, Publisher
from services.bus.relay import EventRelay, RelayConfig
from services.observe.logs import log_context
from services.store import repository
from services.store.db import session_scope
from services.store.errors import UnknownRun
from services.store.models import EvalRun
from services.store.outbox import StoreOutbox

log = logging.getLogger(__name__)
SINK_GROUP = "cheems-evaluator"


@dataclass(frozen=True)
class SinkConfig:
    """How the result sink consumes.

    batch_size: scores taken per poll (the consumer's max_poll_records): stored in one transaction,
        each run among them checked for completion once, their offsets committed once.
    delay: seconds to pause after each stored batch (tests kill a slowed sink mid-run).
    relay: how the sink's outbox relay publishes the runs' result events.
    """

    batch_size: int = 512
    delay: float = 0.0
    relay: RelayConfig = field(default_factory=RelayConfig)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {self.delay}")


@dataclass
class SinkStats:
    """Where the sink's handler time goes, added up (seconds by `time.perf_counter`)."""

    stored: int = 0  # scores newly stored (replays not counted)
    checks: int = 0  # completion checks: one per run per batch
    store_s: float = 0.0  # writing batches (one transaction each)
    check_s: float = 0.0  # completion checks
    finish_s: float = 0.0  # metrics of complete runs: computed and stored with their events


class ResultSink:
    """Consumes scores into eval_scores in batches; finishes a run once every item has its scores.

    `cache` keeps the bench files this process has read (one shared with `start_run` spares reading them twice).
    """

    def __init__(
        self,
        bootstrap: str,
        engine: Engine,
        config: SinkConfig | None = None,
        group: str = SINK_GROUP,
        cache: BenchCache | None = None,
    ) -> None:
        self.engine, self.config, self.cache = engine, config or SinkConfig(), cache or BenchCache()
        self.publisher = Publisher(bootstrap)  # the dead letters' (and a start-up check that the broker answers)
        self.consumer = EventConsumer(
            bootstrap, [topics.SCORES], group, dead_letters=self.publisher,
            batch_handler=self.handle_batch, max_poll_records=self.config.batch_size,
        )  # fmt: skip
        relayed = StoreOutbox(engine, topics.RELAYED_BY["eval-sink"])  # its own producer: the relay renews it
        producer = Publisher(bootstrap, max_block_ms=int(self.config.relay.ack_timeout * 1000), connect=False)
        self.relay = EventRelay(relayed, producer, self.config.relay).start()
        self.stats = SinkStats()

    def handle(self, topic: str, key: str, event: Any) -> None:
        """One score event: a batch of one."""
        self.handle_batch([Delivery(topic, key, event)])

    def handle_batch(self, deliveries: list[Delivery]) -> None:
        """Store the batch's scores together, fail the runs it gives up on, check each run it touched once."""
        plan = plan_batch(d.event for d in deliveries)
        with log_context(run_id=only_run(d.event for d in deliveries)):
            touched = self._store(plan.rows)
        for run_id, reason in plan.failures:
            with log_context(run_id=run_id):
                self._fail_known(run_id, reason)
        time.sleep(self.config.delay)
        for run_id in touched:
            with log_context(run_id=run_id):
                self.finish_if_complete(run_id)

    def _store(self, rows: list[ScoreRow]) -> list[str]:
        """Store the rows in one transaction, or one by one if the database refuses them together; the runs
        whose scores were kept (stored now or before)."""
        if not rows:
            return []
        started = time.perf_counter()
        try:
            return self._store_together(rows)
        except Exception as e:
            if _unreachable(e):
                raise
            log.warning("%d scores could not be stored together (%s: %s); storing them one by one",
                        len(rows), type(e).__name__, e)  # fmt: skip
            return runs_of(row for row in rows if self._store_alone(row))
        finally:
            self.stats.store_s += time.perf_counter() - started

    def _store_together(self, rows: list[ScoreRow]) -> list[str]:
        with session_scope(self.engine) as session:
            runs = repository.runs_by_id(session, runs_of(rows))
            kept = accept(rows, {run_id: run.model_id for run_id, run in runs.items()}, _log_dropped)
            stored = repository.record_many_scores(session, [(r.run_id, r.item, r.scores) for r in kept])
        self.stats.stored += stored  # once committed
        return runs_of(kept)

    def _store_alone(self, row: ScoreRow) -> bool:
        """Store one row in a transaction of its own; a row the database refuses fails its run. Whether kept."""
        try:
            return bool(self._store_together([row]))
        except Exception as e:
            if _unreachable(e):
                raise
            reason = f"the scores of {row.item} could not be stored: {type(e).__name__}: {e}"
            self._fail_known(row.run_id, reason)
            return False

    def _fail_known(self, run_id: str, reason: str) -> None:
        try:
            if fail_run(self.engine, run_id, reason):
                self.relay.kick()
        except UnknownRun:  # a run this database does not hold: not ours
            log.warning("ignoring scores of unknown run %s", run_id)

    def finish_if_complete(self, run_id: str) -> EvalResult | None:
        """Compute and store the run's metrics, its event queued with them, if all its items are scored; None if not
        (yet).

        A run that cannot be finished (a bench file changed or broken since StartRun, metrics the
        database refuses) is marked failed with the reason, and the sink goes on with other runs:
        raising here would stop it at this score again after every restart. Only a database that
        cannot be reached raises (nothing can be recorded then; the redelivered score retries).
        """
        started = time.perf_counter()
        with session_scope(self.engine) as session:
            run = repository.get_run(session, run_id)
            complete = run.state == "running" and repository.count_scored(session, run_id) == run.items_total
            scores = repository.run_scores(session, run_id) if complete else {}
        finishing = time.perf_counter()
        self.stats.checks, self.stats.check_s = self.stats.checks + 1, self.stats.check_s + finishing - started
        if not complete:
            return None
        try:
            finished = self._store_result(run, scores)
        except Exception as e:  # anything else fails again on every redelivery of this score
            if _unreachable(e):
                raise
            self._fail(run_id, e)
            return None
        finally:
            self.stats.finish_s += time.perf_counter() - finishing
        if finished is None:
            return None  # another sink finished it meanwhile
        self.relay.kick()  # committed: publish its event now rather than at the relay's next sweep
        log.info("run %s complete: overall %.4f", run_id, finished.overall)
        return finished

    def _store_result(self, run: EvalRun, scores: Mapping[str, Mapping[str, float]]) -> EvalResult | None:
        """The run's metrics stored on it, its event queued with them; None if it had ended already."""
        subsets = load_subsets(run.bench_files, self.cache)
        result = evaluate(subsets, rewards_of(subsets, scores), EvalOptions(Semantics(run.semantics), run.ece_bins))
        with session_scope(self.engine) as session:  # a value the database refuses: the whole unit rolls back
            return result if end_run(session, run.id, to_json(result)) else None

    def _fail(self, run_id: str, error: Exception) -> None:
        log.error("run %s could not be finished", run_id, exc_info=error)
        reason = str(error) if isinstance(error, CheemsError) else f"{type(error).__name__}: {error}"
        self._fail_known(run_id, f"the run could not be finished: {reason}")

    def close(self) -> None:
        """Leave the group, then stop the relay (what it could not publish waits in the outbox for the next start)."""
        self.consumer.close()
        self.relay.stop()
        self.relay.publisher.close(timeout=5)
        self.publisher.close()


def _log_dropped(dropped: Dropped) -> None:
    row = dropped.row
    if dropped.wanted is None:
        log.warning("ignoring scores of unknown run %s", row.run_id)
    else:
        log.warning("run %s: dropping the scores of %s from model %r: the run evaluates %r",
                    row.run_id, row.item, row.model_id, dropped.wanted)  # fmt: skip


def _unreachable(error: Exception) -> bool:
    """The database cannot be reached now (retry later), as opposed to refusing a value."""
    if isinstance(error, DBAPIError):
        return bool(error.connection_invalidated) or isinstance(error, (OperationalError, InterfaceError))
    return False
