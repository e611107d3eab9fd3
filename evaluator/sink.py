"""The result sink: scores from Kafka -> eval_scores; a run whose every item is scored -> its metrics.

    sink = ResultSink("localhost:9092", engine)
    sink.consumer.poll_once()   # or run it as a process: `cheems service eval-sink` (evaluator.process)

Storing a score is idempotent (keyed by run and item), so a redelivered score is a no-op and the
sink can be killed and restarted at any point: the run still ends with the same metrics. Once
complete, the metrics are computed with the run's own options (`evaluator.evaluate.evaluate`),
stored on the run and published to cheems.eval-results.v1.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy.engine import Engine

from cheems.v1 import evaluation_pb2, events_pb2
from evaluator.convert import run_proto
from evaluator.evaluate import BenchCache, EvalOptions, evaluate, load_subsets
from evaluator.metrics import EvalResult, Semantics
from evaluator.report import to_json
from evaluator.runs import rewards_of
from services.bus import topics
from services.bus.client import EventConsumer, Publisher
from services.store import repository
from services.store.db import session_scope
from services.store.errors import UnknownRun

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
        scores = dict(zip(event.response_ids, event.scores, strict=True))
        try:
            with session_scope(self.engine) as session:
                repository.record_scores(session, event.run_id, event.prompt_id, scores)
        except UnknownRun:  # a run this database does not hold: not ours
            log.warning("ignoring scores of unknown run %s", event.run_id)
            return
        time.sleep(self.delay)
        self.finish_if_complete(event.run_id)

    def finish_if_complete(self, run_id: str) -> EvalResult | None:
        """Compute, store and publish the run's metrics if all its items are scored; None if not (yet)."""
        with session_scope(self.engine) as session:
            run = repository.get_run(session, run_id)
            if run.state != "running" or repository.count_scored(session, run_id) != run.items_total:
                return None
            scores = repository.run_scores(session, run_id)
        subsets = load_subsets(run.bench_files, self.cache)
        result = evaluate(subsets, rewards_of(subsets, scores), EvalOptions(Semantics(run.semantics), run.ece_bins))
        with session_scope(self.engine) as session:
            if not repository.end_run(session, run_id, to_json(result)):
                return None  # another sink finished it meanwhile
            message = run_proto(repository.get_run(session, run_id), run.items_total)
        self._publish(message)
        log.info("run %s complete: overall %.4f", run_id, result.overall)
        return result

    def _publish(self, run: evaluation_pb2.EvalRun) -> None:
        event = events_pb2.EvalResultEvent(header=events_pb2.EventHeader(producer="evaluator"), run=run)
        self.publisher.publish(topics.EVAL_RESULTS, run.run_id, event)
        self.publisher.flush()

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()
