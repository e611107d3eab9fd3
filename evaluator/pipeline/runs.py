"""Evaluation runs through Kafka: start one (record it, publish a score request per benchmark prompt), read it back.

    run_id = start_run(engine, publisher, ["open.jsonl", "human.jsonl"], "localhost:50051", EvalOptions(ece_bins=10))
    run_id = start_run(engine, publisher, bench, scorer_url, model_id="rm-ab12")   # a registered model's run
    state, scored, total, result_json = run_state(engine, run_id)
    message = run_message(engine, run_id)   # cheems.v1.EvalRun, what GetRun answers

The score workers (`evaluator.pipeline.worker`) answer the requests and the result sink (`evaluator.pipeline.sink`)
stores the scores and finishes the run. A run's end (succeeded: `end_run`, failed: `fail_run`) queues its
EvalResultEvent (cheems.eval-results.v1, key = run id) in the store's outbox in the transaction that ends it;
the result sink's relay (`topics.RELAYED_BY["eval-sink"]`) publishes it after the commit, so a broker outage
delays the event and loses none. Items are keyed "<subset>:<index>"; the run's options
(semantics, ECE bins) are stored with it, so the sink computes exactly what was asked for. A run of
a registered model carries its id on every request: the workers score it only with that model, and
the sink keeps only that model's scores, so a run never mixes models.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from kafka.errors import KafkaError
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.formats.rewards_file import RewardKey
from cheems.v1 import evaluation_pb2, events_pb2, reward_pb2
from evaluator.convert import FAILED_MESSAGE, run_proto
from evaluator.errors import PublishFailed
from evaluator.evaluate import DEFAULT_OPTIONS, BenchCache, EvalOptions, Subsets, load_subsets
from evaluator.metrics import EvalResult
from evaluator.report import from_json
from services.bus import topics
from services.bus.client import Publisher
from services.bus.codec import encode
from services.store import outbox, registry, repository
from services.store.db import session_scope
from services.store.errors import UnknownModel

log = logging.getLogger(__name__)


class RunStatus(NamedTuple):
    state: str  # "running", "succeeded" or "failed"
    scored: int  # items whose scores are stored
    total: int
    result: dict[str, Any] | None  # the metrics as JSON (`evaluator.report.to_json`), once succeeded


def item_key(subset: str, index: int) -> str:
    return f"{subset}:{index}"


def start_run(
    engine: Engine,
    publisher: Publisher,
    bench: Sequence[str],
    scorer_url: str,
    options: EvalOptions = DEFAULT_OPTIONS,
    cache: BenchCache | None = None,
    model_id: str = "",
) -> str:
    """Record the run and publish one score request per benchmark prompt; returns the run id.

    `model_id`: the registered model to evaluate (empty: whichever model the scorer serves).

    Bad bench files raise before anything is stored; a broker that cannot take the requests leaves
    the run "failed" (never "running" forever) and raises PublishFailed.
    """
    subsets = load_subsets(bench, cache)
    total = sum(len(items) for _, items in subsets.values())
    with session_scope(engine) as session:
        run_id = repository.create_run(
            session, [str(p) for p in bench], scorer_url, options.semantics.value, options.ece_bins, total, model_id
        )
    try:
        _publish_requests(publisher, run_id, subsets, model_id)
    except KafkaError as e:
        publisher.renew()  # a producer whose broker was replaced stays failed: the next run gets a new one
        fail_run(engine, run_id, f"{FAILED_MESSAGE}: {e}")
        raise PublishFailed(f"{FAILED_MESSAGE}: {e}") from e
    except Exception as e:
        fail_run(engine, run_id, f"{FAILED_MESSAGE}: {type(e).__name__}: {e}")
        raise
    return run_id


def require_model(engine: Engine, model_id: str) -> None:
    """UnknownModel (NOT_FOUND), naming the field, unless `model_id` is a registered model."""
    with session_scope(engine) as session:
        try:
            registry.get_model(session, model_id)
        except UnknownModel:
            raise UnknownModel(f"model_id: no registered model {model_id!r}") from None


def fail_run(engine: Engine, run_id: str, reason: str) -> bool:
    """Record that the run failed and why (GetRun's `error`), its event queued with it; False if it had ended
    already."""
    with session_scope(engine) as session:
        failed = fail_in(session, run_id, reason)
    if failed:
        log.warning("run %s failed: %s", run_id, reason)
    return failed


def fail_in(session: Session, run_id: str, reason: str) -> bool:
    """`fail_run` in the caller's transaction."""
    if not repository.fail_run(session, run_id, reason):
        return False
    announce_end(session, run_id)
    return True


def end_run(session: Session, run_id: str, result: Mapping[str, Any]) -> bool:
    """The run succeeded with `result` (its metrics as JSON), its event queued in the same transaction; False if
    it had ended already. A value the database refuses raises here (the caller's transaction rolls back)."""
    if not repository.end_run(session, run_id, result):
        return False
    session.flush()
    announce_end(session, run_id)
    return True


def announce_end(session: Session, run_id: str) -> None:
    """Queue the EvalResultEvent of a run that ended in `session`'s transaction (the outbox: the result sink's
    relay publishes it after the commit)."""
    run = run_proto(repository.get_run(session, run_id), repository.count_scored(session, run_id))
    event = events_pb2.EvalResultEvent(header=events_pb2.EventHeader(producer="evaluator"), run=run)
    outbox.add(session, topics.EVAL_RESULTS, run_id, encode(topics.EVAL_RESULTS, event).value)


def _publish_requests(publisher: Publisher, run_id: str, subsets: Subsets, model_id: str) -> None:
    """Every request acknowledged by the broker, or KafkaError: a run is "running" only with all its requests out."""
    sent = []
    for name, (_, items) in subsets.items():
        for index, item in enumerate(items):
            key = item_key(name, index)
            request = reward_pb2.ScoreRequest(
                prompt=item.input,
                responses=[r.content for r in item.responses],
                system_prompt=str(item.extra.get("sys_prompt") or ""),
                model=model_id,  # scored by the run's model by name, whatever the scorer serves by default
            )
            event = events_pb2.ScoreRequestEvent(
                header=events_pb2.EventHeader(event_id=f"{run_id}/{key}", producer="evaluator"),
                run_id=run_id,
                subset=name,
                prompt_id=key,
                response_ids=[r.id for r in item.responses],
                request=request,
                model_id=model_id,
            )
            sent.append(publisher.publish(topics.SCORE_REQUESTS, key, event))
    publisher.confirm(sent)


def rewards_of(subsets: Subsets, scores: Mapping[str, Mapping[str, float]]) -> dict[RewardKey, float]:
    """The stored per-item scores as a rewards mapping, (prompt, response id) -> reward, for `evaluate`."""
    return {
        (item.input, rid): value
        for name, (_, items) in subsets.items()
        for index, item in enumerate(items)
        for rid, value in scores.get(item_key(name, index), {}).items()
    }


def run_state(engine: Engine, run_id: str) -> RunStatus:
    """The run's state, progress and result JSON; UnknownRun for an id the store does not hold."""
    with session_scope(engine) as session:
        run = repository.get_run(session, run_id)
        result = run.result if run.state == "succeeded" else None  # a failed run's result holds its reason
        return RunStatus(run.state, repository.count_scored(session, run_id), run.items_total, result)


def run_message(engine: Engine, run_id: str) -> evaluation_pb2.EvalRun:
    """The run as `cheems.v1.EvalRun`; UnknownRun for an id the store does not hold."""
    with session_scope(engine) as session:
        return run_proto(repository.get_run(session, run_id), repository.count_scored(session, run_id))


def stored_result(engine: Engine, run_id: str) -> EvalResult | None:
    """The metrics the result sink stored for the run, or None while it is not complete."""
    result = run_state(engine, run_id).result
    return None if result is None else from_json(result)
