"""The result sink: scores from Kafka -> eval_scores; a run whose every item is scored -> its metrics.

    sink = ResultSink("localhost:9092", engine)
    sink.consumer.poll_once()   # or run it as a process: `cheems service eval-sink` (evaluator.process)

Storing a score is idempotent (keyed by run and item), so a redelivered score is a no-op and the
sink can be killed and restarted at any point: the run still ends with the same metrics. Once
complete, the metrics are computed with the run's own options (`evaluator.evaluate.evaluate`),
stored on the run and published to cheems.eval-results.v1. A run that cannot be finished (its bench
file changed or broke since StartRun, metrics the database refuses) is marked failed with the reason,
which GetRun reports, and the sink goes on with the other runs.

A run of a registered model stores only the scores of that model (the ScoreEvent's `model_id`);
scores from another model are logged and dropped, so a run never mixes models. A ScoreEvent with
`error` (a worker gave up waiting for the run's model) fails the run with that reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from cheems.errors import CheemsError
from cheems.v1 import evaluation_pb2, events_pb2
from evaluator.convert import run_proto
from evaluator.evaluate import BenchCache, EvalOptions, evaluate, load_subsets
from evaluator.metrics import EvalResult, Semantics
from evaluator.report import to_json
from evaluator.runs import fail_run, rewards_of
from services.bus import topics
from services.bus.client import EventConsumer, Publisher
from services.store import repository
from services.store.db import session_scope
from services.store.errors import UnknownRun
from services.store.models import EvalRun

log = logging.getLogger(__name__)
SINK_GROUP = "cheems-evaluator"


class ResultSink:
    """Consumes scores into eval_scores; finishes a run once every item has its scores.

    `delay` (seconds after each stored score) lets tests kill the sink mid-run; `cache` keeps the
    bench files this process has read (one shared with `start_run` spares reading them twice).
    """

    def __init__(
        self,
        bootstrap: str,
        engine: Engine,
        delay: float = 0.0,
        group: str = SINK_GROUP,
        cache: BenchCache | None = None,
    ) -> None:
        self.engine, self.delay, self.cache = engine, delay, cache or BenchCache()
        self.publisher = Publisher(bootstrap)
        self.consumer = EventConsumer(bootstrap, [topics.SCORES], group, self.handle, self.publisher)

    def handle(self, topic: str, key: str, event: Any) -> None:
        try:
            if event.error:
                fail_run(self.engine, event.run_id, event.error)
                return
            if not self._record(event):
                return
        except UnknownRun:  # a run this database does not hold: not ours
            log.warning("ignoring scores of unknown run %s", event.run_id)
            return
        time.sleep(self.delay)
        self.finish_if_complete(event.run_id)

    def _record(self, event: Any) -> bool:
        """Store the item's scores if they come from the run's model; False (logged) if they do not."""
        scores = dict(zip(event.response_ids, event.scores, strict=True))
        with session_scope(self.engine) as session:
            wanted = repository.get_run(session, event.run_id).model_id
            if wanted and event.model_id != wanted:
                log.warning(
                    "run %s: dropping the scores of %s from model %r: the run evaluates %r",
                    event.run_id, event.prompt_id, event.model_id, wanted,
                )  # fmt: skip
                return False
            repository.record_scores(session, event.run_id, event.prompt_id, scores)
        return True

    def finish_if_complete(self, run_id: str) -> EvalResult | None:
        """Compute, store and publish the run's metrics if all its items are scored; None if not (yet).

        A run that cannot be finished (a bench file changed or broken since StartRun, metrics the
        database refuses) is marked failed with the reason, and the sink goes on with other runs:
        raising here would stop it at this score again after every restart. Only a database that
        cannot be reached raises (nothing can be recorded then; the redelivered score retries).
        """
        with session_scope(self.engine) as session:
            run = repository.get_run(session, run_id)
            if run.state != "running" or repository.count_scored(session, run_id) != run.items_total:
                return None
            scores = repository.run_scores(session, run_id)
        try:
            finished = self._store_result(run, scores)
        except Exception as e:  # anything else fails again on every redelivery of this score
            if _unreachable(e):
                raise
            self._fail(run_id, e)
            return None
        if finished is None:
            return None  # another sink finished it meanwhile
        result, message = finished
        log.info("run %s complete: overall %.4f", run_id, result.overall)
        try:
            self._publish(message)
        except Exception:  # the result is stored (GetRun serves it); a lost event must not stop the sink
            log.exception("run %s: its result is stored but was not published to %s", run_id, topics.EVAL_RESULTS)
        return result

    def _store_result(
        self, run: EvalRun, scores: Mapping[str, Mapping[str, float]]
    ) -> tuple[EvalResult, evaluation_pb2.EvalRun] | None:
        """The run's metrics stored on it, and the run as a message; None if it had ended already."""
        subsets = load_subsets(run.bench_files, self.cache)
        result = evaluate(subsets, rewards_of(subsets, scores), EvalOptions(Semantics(run.semantics), run.ece_bins))
        with session_scope(self.engine) as session:
            if not repository.end_run(session, run.id, to_json(result)):
                return None
            session.flush()  # a value the database refuses fails here, and the whole unit rolls back
            return result, run_proto(repository.get_run(session, run.id), run.items_total)

    def _fail(self, run_id: str, error: Exception) -> None:
        log.error("run %s could not be finished", run_id, exc_info=error)
        reason = str(error) if isinstance(error, CheemsError) else f"{type(error).__name__}: {error}"
        fail_run(self.engine, run_id, f"the run could not be finished: {reason}")

    def _publish(self, run: evaluation_pb2.EvalRun) -> None:
        event = events_pb2.EvalResultEvent(header=events_pb2.EventHeader(producer="evaluator"), run=run)
        self.publisher.publish(topics.EVAL_RESULTS, run.run_id, event)
        self.publisher.flush()

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()


def _unreachable(error: Exception) -> bool:
    """The database cannot be reached now (retry later), as opposed to refusing a value."""
    if isinstance(error, DBAPIError):
        return bool(error.connection_invalidated) or isinstance(error, (OperationalError, InterfaceError))
    return False
