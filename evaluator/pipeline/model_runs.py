"""The model evaluator: every newly registered model (cheems.models.v1) gets a CheemsBench run.

    config = ModelRunsConfig(bench=("bench/open.jsonl", "bench/human.jsonl"), scorer_url="localhost:50051")
    evaluator = ModelEvaluator("localhost:9092", engine, publisher, config)
    evaluator.consumer.poll_once()   # or: cheems service evaluation --evaluate-models open.jsonl ... (a thread there)

For each ModelEvent of a model the registry holds it starts a run of that model
(`evaluator.pipeline.runs.start_run(..., model_id=...)`) on the configured bench files and scorer; the score
workers and the result sink do the rest, and the result is stored per model (eval_runs.model_id) and published on
cheems.eval-results.v1. One run per model: a redelivered event finds the model's run in the store and starts
nothing. A run that cannot start (a bench file broken since the service started, a broker that refuses the score
requests) is recorded failed with the reason (its EvalResultEvent queued in the outbox with it, published by the
result sink's relay), so the model's evaluation shows why it is missing, and the consumer goes on. An event naming
a model the registry does not hold (forged, or of another store) is logged and starts nothing: the event is only a
hint, the registry says what exists (as the scorer's `--follow` does).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from cheems.errors import CheemsError
from evaluator.evaluate import DEFAULT_OPTIONS, BenchCache, EvalOptions
from evaluator.pipeline.runs import fail_in, require_model, start_run
from services.bus import topics
from services.bus.client import EventConsumer, Publisher
from services.store import repository
from services.store.db import session_scope
from services.store.errors import InvalidRecord, UnknownModel

log = logging.getLogger(__name__)
MODEL_EVALUATOR_GROUP = "cheems-model-evaluator"


@dataclass(frozen=True)
class ModelRunsConfig:
    """What every new model is evaluated on.

    bench: the bench files (paths the result sink can read too), one subset each.
    scorer_url: the scorer's gRPC address stored with each run (the score workers call their own).
    options: semantics and ECE bins of the runs.
    group: the consumer group of cheems.models.v1.
    """

    bench: tuple[str, ...]
    scorer_url: str
    options: EvalOptions = DEFAULT_OPTIONS
    group: str = MODEL_EVALUATOR_GROUP

    def __post_init__(self) -> None:
        object.__setattr__(self, "bench", tuple(str(p) for p in self.bench))
        if not self.bench:
            raise ValueError("bench: name at least one bench file to evaluate new models on")
        if not self.scorer_url.strip():
            raise ValueError("scorer_url: give the scorer's gRPC address, host:port")


class ModelEvaluator:
    """Consumes model events and starts one evaluation run per model."""

    def __init__(
        self,
        bootstrap: str,
        engine: Engine,
        publisher: Publisher,
        config: ModelRunsConfig,
        cache: BenchCache | None = None,
    ) -> None:
        self.engine, self.publisher, self.config, self.cache = engine, publisher, config, cache or BenchCache()
        self.consumer = EventConsumer(bootstrap, [topics.MODELS], config.group, self.handle, publisher)

    def handle(self, topic: str, key: str, event: Any) -> None:
        model_id = event.model.model_id
        if not model_id:
            log.warning("ignoring a model event without a model id (key %r)", key)
            return
        if event.change.action not in ("", "registered"):  # a lifecycle step of a model known already
            return
        try:
            require_model(self.engine, model_id)
        except (UnknownModel, InvalidRecord):  # not registered, or an id no model could have
            log.warning("model event names %r, which the registry does not hold: no run started", model_id)
            return
        self.evaluate(model_id)

    def evaluate(self, model_id: str) -> str | None:
        """Start the model's run unless it has one; the id of the run started, or None."""
        known = self._runs(model_id)
        if known:
            log.info("model %s has run %s already: not starting another", model_id, known[0])
            return None
        config = self.config
        try:
            run_id = start_run(
                self.engine, self.publisher, config.bench, config.scorer_url, config.options, self.cache, model_id
            )
        except CheemsError as e:  # start_run recorded a run it could not publish; a bad bench file it did not
            if not self._runs(model_id):
                self._record_failure(model_id, f"the evaluation could not start: {e}")
            log.error("model %s: the evaluation could not start: %s", model_id, e)
            return None
        log.info("model %s: evaluation run %s started on %s", model_id, run_id, ", ".join(config.bench))
        return run_id

    def _runs(self, model_id: str) -> list[str]:
        with session_scope(self.engine) as session:
            return [run.id for run in repository.runs_of_model(session, model_id)]

    def _record_failure(self, model_id: str, reason: str) -> None:
        """A failed run of the model that scored nothing, its reason kept (what GetRun and status show)."""
        config = self.config
        with session_scope(self.engine) as session:
            run_id = repository.create_run(
                session, list(config.bench), config.scorer_url, config.options.semantics.value,
                config.options.ece_bins, 0, model_id,
            )  # fmt: skip
            session.flush()
            fail_in(session, run_id, reason)  # its EvalResultEvent queued with it

    def close(self) -> None:
        self.consumer.close()
