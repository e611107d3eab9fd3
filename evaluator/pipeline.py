"""The streaming evaluator: CheemsBench through Kafka, scored by scorer workers over gRPC.

    run_id = start_run(engine, publisher, ["open.jsonl", "human.jsonl"], "localhost:50051")
    # score workers:  ScoreWorker(...) consume cheems.score-requests.v1, call RewardService, publish cheems.scores.v1
    # the evaluator:  ResultSink(...) consumes cheems.scores.v1 into eval_scores (idempotent), and when a run
    #                 is complete computes the metrics, stores them and publishes cheems.eval-results.v1
    python -m evaluator.pipeline worker|sink --bootstrap HOST:PORT --db URL [--scorer-url ...]

Items are keyed "<subset>:<index>"; a redelivered score is a no-op (primary key), so a worker or the
sink can be killed and restarted at any point and the run still ends with the same metrics.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.v1 import evaluation_pb2, events_pb2, reward_pb2
from evaluator.evaluate import load_subsets
from evaluator.join import join_rewards
from evaluator.metrics import EvalResult, Semantics, evaluate_subsets
from evaluator.report import from_json, to_json
from services.bus import topics
from services.bus.client import EventConsumer, Publisher
from services.store.db import session_scope
from services.store.models import EvalRun, EvalScore

log = logging.getLogger(__name__)
WORKER_GROUP, SINK_GROUP = "cheems-score-workers", "cheems-evaluator"


def start_run(
    engine: Engine, publisher: Publisher, bench: Sequence[str], scorer_url: str, semantics: Semantics = Semantics.PAPER
) -> str:
    """Record the run and publish one score request per benchmark prompt; returns the run id.

    Bad bench files raise before anything is stored; a broker that cannot take the requests leaves
    the run "failed" (never "running" forever) and the error propagates.
    """
    subsets = load_subsets(bench)
    run_id = uuid.uuid4().hex
    with session_scope(engine) as session:
        session.add(
            EvalRun(
                id=run_id,
                bench_files=[str(p) for p in bench],
                scorer_url=scorer_url,
                semantics=semantics.value,
                items_total=sum(len(i) for _, i in subsets.values()),
            )
        )
    try:
        _publish_requests(publisher, run_id, subsets)
    except Exception:
        with session_scope(engine) as session:
            run = session.get(EvalRun, run_id)
            if run is not None:
                run.state = "failed"
        raise
    return run_id


def _publish_requests(publisher: Publisher, run_id: str, subsets: dict[str, Any]) -> None:
    for name, (_, items) in subsets.items():
        for index, item in enumerate(items):
            key = f"{name}:{index}"
            request = reward_pb2.ScoreRequest(
                prompt=item.input,
                responses=[r.content for r in item.responses],
                system_prompt=str(item.extra.get("sys_prompt") or ""),
            )
            event = events_pb2.ScoreRequestEvent(
                header=events_pb2.EventHeader(event_id=f"{run_id}/{key}", producer="evaluator"),
                run_id=run_id,
                subset=name,
                prompt_id=key,
                response_ids=[r.id for r in item.responses],
                request=request,
            )
            publisher.publish(topics.SCORE_REQUESTS, key, event)
    publisher.flush()


class ScoreWorker:
    """Consumes score requests, calls the scorer, publishes scores (flushed before the offset commit)."""

    def __init__(self, bootstrap: str, scorer_url: str, token: str = "", group: str = WORKER_GROUP) -> None:
        from services.scorer.client import RewardClient

        self.client = RewardClient(scorer_url, token=token, timeout=300)
        self.scored: dict[str, int] = {}  # requests answered, per run
        self.publisher = Publisher(bootstrap)
        self.consumer = EventConsumer(bootstrap, [topics.SCORE_REQUESTS], group, self.handle, self.publisher)

    def handle(self, topic: str, key: str, event: Any) -> None:
        scores = self.client.score(event.request.prompt, list(event.request.responses), event.request.system_prompt)
        out = events_pb2.ScoreEvent(
            header=events_pb2.EventHeader(event_id=event.header.event_id, producer="worker"),
            run_id=event.run_id,
            subset=event.subset,
            prompt_id=event.prompt_id,
            response_ids=event.response_ids,
            scores=scores,
        )
        self.publisher.publish(topics.SCORES, key, out)
        self.publisher.flush()
        self.scored[event.run_id] = self.scored.get(event.run_id, 0) + 1

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()
        self.client.close()


class ResultSink:
    """Consumes scores into eval_scores; finishes a run once every item has its scores."""

    def __init__(self, bootstrap: str, engine: Engine, delay: float = 0.0, group: str = SINK_GROUP) -> None:
        self.engine, self.delay = engine, delay  # delay: lets tests kill it mid-run
        self.publisher = Publisher(bootstrap)
        self.consumer = EventConsumer(bootstrap, [topics.SCORES], group, self.handle, self.publisher)

    def handle(self, topic: str, key: str, event: Any) -> None:
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        row = {
            "run_id": event.run_id,
            "item": event.prompt_id,
            "response_ids": list(event.response_ids),
            "scores": list(event.scores),
        }
        with session_scope(self.engine) as session:
            if session.get(EvalRun, event.run_id) is None:  # a run this database does not hold: not ours
                log.warning("ignoring scores of unknown run %s", event.run_id)
                return
            session.execute(insert(EvalScore).values(**row).on_conflict_do_nothing())
        time.sleep(self.delay)
        self.finish_if_complete(event.run_id)

    def finish_if_complete(self, run_id: str) -> EvalResult | None:
        with session_scope(self.engine) as session:
            run = session.get(EvalRun, run_id)
            done = _scored(session, run_id)
            if run is None or run.state != "running" or done != run.items_total:
                return None
            rows = session.scalars(select(EvalScore).where(EvalScore.run_id == run_id)).all()
            result = compute(
                run.bench_files,
                {r.item: dict(zip(r.response_ids, r.scores, strict=True)) for r in rows},
                Semantics(run.semantics),
            )
            run.result, run.state = to_json(result), "succeeded"
        self.publisher.publish(
            topics.EVAL_RESULTS,
            run_id,
            events_pb2.EvalResultEvent(
                header=events_pb2.EventHeader(producer="evaluator"),
                run=evaluation_pb2.EvalRun(
                    run_id=run_id,
                    items_total=run.items_total,
                    items_scored=run.items_total,
                    state=evaluation_pb2.RUN_STATE_SUCCEEDED,
                    result=result_proto(result),
                ),
            ),
        )
        self.publisher.flush()
        log.info("run %s complete: overall %.4f", run_id, result.overall)
        return result

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()


SEMANTICS_PROTO = {
    Semantics.PAPER: evaluation_pb2.SEMANTICS_PAPER,
    Semantics.OFFICIAL: evaluation_pb2.SEMANTICS_OFFICIAL,
}
STATE_PROTO = {
    "running": evaluation_pb2.RUN_STATE_RUNNING,
    "succeeded": evaluation_pb2.RUN_STATE_SUCCEEDED,
    "failed": evaluation_pb2.RUN_STATE_FAILED,
}


def result_proto(result: EvalResult) -> evaluation_pb2.EvalResult:
    subsets = {
        name: evaluation_pb2.SubsetMetrics(
            accuracy=s.accuracy,
            exact_match=s.exact_match,
            ece=s.ece or 0.0,
            prompts=s.prompts,
            pairs=s.pairs,
            per_category={
                c: evaluation_pb2.CategoryMetrics(
                    accuracy=m.accuracy or 0.0,
                    exact_match=m.exact_match,
                    ece=m.ece or 0.0,
                    prompts=m.prompts,
                    pairs=m.pairs,
                )
                for c, m in s.per_category.items()
            },
        )
        for name, s in result.subsets.items()
    }
    return evaluation_pb2.EvalResult(
        semantics=SEMANTICS_PROTO[result.semantics], overall=result.overall, subsets=subsets
    )


def compute(bench: Sequence[str], scores: dict[str, dict[str, float]], semantics: Semantics) -> EvalResult:
    """The same metrics `cheems eval` computes, from the stored per-item scores."""
    subsets = load_subsets(bench)
    rewards = {
        (item.input, rid): value
        for name, (_, items) in subsets.items()
        for index, item in enumerate(items)
        for rid, value in scores[f"{name}:{index}"].items()
    }
    return evaluate_subsets(
        {name: join_rewards(items, rewards, path) for name, (path, items) in subsets.items()}, semantics
    )


def _scored(session: Session, run_id: str) -> int:
    """How many of the run's items have their scores stored."""
    return int(session.scalar(select(func.count()).select_from(EvalScore).where(EvalScore.run_id == run_id)) or 0)


def run_state(engine: Engine, run_id: str) -> tuple[str, int, int, dict[str, Any] | None]:
    """(state, items scored, items total, result JSON)."""
    with session_scope(engine) as session:
        run = session.get(EvalRun, run_id)
        if run is None:
            raise KeyError(run_id)
        done = _scored(session, run_id)
        return run.state, done, run.items_total, run.result


def run_proto(engine: Engine, run_id: str) -> evaluation_pb2.EvalRun:
    """The run as `cheems.v1.EvalRun`: files, scorer, state, progress and, once complete, the metrics."""
    with session_scope(engine) as session:
        run = session.get(EvalRun, run_id)
        if run is None:
            raise KeyError(run_id)
        done = _scored(session, run_id)
        message = evaluation_pb2.EvalRun(
            run_id=run.id,
            scorer_url=run.scorer_url,
            bench_files=[str(p) for p in run.bench_files],
            semantics=SEMANTICS_PROTO[Semantics(run.semantics)],
            state=STATE_PROTO[run.state],
            items_total=run.items_total,
            items_scored=done,
        )
        if run.result is not None:
            message.result.CopyFrom(result_proto(from_json(run.result)))
        if run.state == "failed":
            message.error = "the score requests could not be published"
        return message


def evaluate_via_kafka(
    bench: Sequence[str],
    scorer_url: str,
    bootstrap: str,
    engine: Engine,
    semantics: Semantics = Semantics.PAPER,
    timeout: float = 3600.0,
    progress: bool = True,
) -> EvalResult:
    """Start a run and drive a score worker and the sink in this process until it completes (progress bar)."""
    from tqdm import tqdm

    publisher = Publisher(bootstrap)
    run_id = start_run(engine, publisher, bench, scorer_url, semantics)
    worker, sink = ScoreWorker(bootstrap, scorer_url), ResultSink(bootstrap, engine)
    deadline = time.monotonic() + timeout
    try:
        with tqdm(
            total=run_state(engine, run_id)[2], desc="eval via kafka", unit="prompt", disable=not progress
        ) as bar:
            while (state := run_state(engine, run_id))[0] != "succeeded":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {run_id} not complete after {timeout} s: {state[1]}/{state[2]} scored")
                worker.consumer.poll_once(200)
                sink.consumer.poll_once(200)
                bar.update(state[1] - bar.n)
            bar.update(state[2] - bar.n)
        with session_scope(engine) as session:
            rows = session.scalars(select(EvalScore).where(EvalScore.run_id == run_id)).all()
            scores = {r.item: dict(zip(r.response_ids, r.scores, strict=True)) for r in rows}
        return compute(bench, scores, semantics)
    finally:
        worker.close()
        sink.close()
        publisher.close()


def serve(
    role: str,
    bootstrap: str,
    db: str,
    scorer_url: str = "",
    delay: float = 0.0,
    group: str = "",
    token: str = "",
    health_port: int = -1,
    stale_after: float = 600.0,
    health_host: str = "127.0.0.1",
) -> None:
    """Run a worker or the sink until SIGTERM/SIGINT; with `health_port` >= 0, gRPC health from a heartbeat."""
    import signal

    from services.hosting import GrpcHost, Heartbeat, HostConfig
    from services.store.db import StoreConfig, create_engine_for

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    role_object: ScoreWorker | ResultSink = (
        ScoreWorker(bootstrap, scorer_url, token, group or WORKER_GROUP)
        if role == "worker"
        else ResultSink(bootstrap, create_engine_for(StoreConfig(db)), delay, group or SINK_GROUP)
    )
    host, on_poll = None, None
    if health_port >= 0:
        host = GrpcHost(
            HostConfig(port=health_port, host=health_host, workers=2), names=[f"cheems.evaluator.{role}"]
        ).start()
        heartbeat = Heartbeat(host, stale_after)
        heartbeat.beat()
        heartbeat.watch(stop)
        on_poll = heartbeat.beat
        print(f"{role}: health on :{host.port}", flush=True)
    try:
        role_object.consumer.run(stop, on_poll)
    finally:
        role_object.close()  # leaves the group at once, so the partitions move without a session timeout
        if host is not None:
            host.stop(0)
    log.info("%s stopped", role)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=["worker", "sink"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--db", default="sqlite:///cheems.db")
    parser.add_argument("--scorer-url", default="")
    parser.add_argument("--token", default=os.environ.get("CHEEMS_SCORER_TOKEN", ""))
    parser.add_argument("--delay", type=float, default=float(os.environ.get("CHEEMS_SINK_DELAY", "0")))
    parser.add_argument("--group", default="", help="consumer group (default: the role's shared group)")
    parser.add_argument("--health-port", type=int, default=-1, help="gRPC health port (-1 = none)")
    parser.add_argument("--host", default="127.0.0.1", help="address of the health port (0.0.0.0 in a pod)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    serve(
        args.role,
        args.bootstrap,
        args.db,
        args.scorer_url,
        args.delay,
        args.group,
        args.token,
        args.health_port,
        health_host=args.host,
    )
