"""The AI judge worker against the stand-in LLM judge (our real client over HTTP), the real broker, and SQLite and
PostgreSQL: sample events -> pair tasks -> AI annotations -> the ranking and its event; replays change nothing."""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from services.annotation.judge.pairwise import JudgeConfig, OpenAICompatibleBackend
from services.annotation.judge.worker import JudgeWorker, JudgeWorkerConfig, annotation_id, run_worker
from services.annotation.service import AnnotationService
from services.annotation.simulation.judge import JudgeServer, SimulatedJudge, SimulatedJudgeConfig
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.observe.logs import setup_logging
from services.store import repository
from services.store.db import session_scope
from services.store.models import Annotation
from services.store.validate import prompt_id_for


def bench(unique: Callable[[str], str]) -> list[BenchItem]:
    polite = [("r1", "您好，请问有什么可以帮您？"), ("r2", "你好呀！"), ("r3", "您好！"), ("r4", "滚。")]
    sums = [("a", "等于2。"), ("b", "2"), ("c", "等于3。")]
    return [
        BenchItem(
            unique("哪个回答更礼貌？"),
            tuple(Response(*r) for r in polite),
            {"r1": 1, "r2": 2, "r3": 2, "r4": 3},
            ("语言",),
        ),
        BenchItem(unique("1+1等于几？"), tuple(Response(*r) for r in sums), {"a": 1, "b": 1, "c": 2}, ("数学",)),
    ]


def agrees(rank: dict[str, int], gold: dict[str, int]) -> bool:
    """The same order: every pair compares the same way (rank numbers may differ)."""
    return all(
        (rank[a] < rank[b], rank[a] == rank[b]) == (gold[a] < gold[b], gold[a] == gold[b]) for a in gold for b in gold
    )


def pair_of(result: dict[str, Any]) -> tuple[str, str]:
    a, b = result["equal"] if "equal" in result else (result["better"], result["worse"])
    return a, b


def stored_annotations(engine: Engine, prompt_id: str) -> list[Annotation]:
    with session_scope(engine) as session:
        return list(session.scalars(select(Annotation).where(Annotation.prompt_id == prompt_id)))


@pytest.fixture
def publisher(broker: EmbeddedBroker) -> Iterator[Publisher]:
    running = Publisher(broker.bootstrap)
    yield running
    running.close()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def judge_log() -> io.StringIO:
    """What the judge worker's process would write at debug level, as JSON lines (services.observe.logs)."""
    out = io.StringIO()
    setup_logging("judge", log_format="json", level="DEBUG", stream=out)  # undone by tests/conftest.py
    return out


API_KEY = "sk-judge-Q7vK2mN9xR4tW8yB6pL3Hs1Jc5Fg0"  # sent to the endpoint as `authorization: Bearer ...`


def test_samples_are_judged_pair_by_pair_into_a_ranking_once(
    engine: Engine,
    broker: EmbeddedBroker,
    publisher: Publisher,
    events: Any,
    make_sample: Any,
    unique: Any,
    judge_log: io.StringIO,
) -> None:
    items, source = bench(unique), f"ai-{uuid.uuid4().hex[:8]}.jsonl"
    samples = [make_sample(i.input, [(r.id, r.content) for r in i.responses], source) for i in items]
    for sample in samples:
        sample.sample.prompt_id = prompt_id_for(sample.sample.prompt)
    pids = [s.sample.prompt_id for s in samples]
    other = make_sample(unique("人来标的题"), [("x", "甲"), ("y", "乙")], "open.jsonl")
    for event in [*samples, other]:
        publisher.publish(topics.SAMPLES, event.sample.prompt_id or "other", event)
    publisher.flush()
    with JudgeServer(SimulatedJudge(items, SimulatedJudgeConfig(noise=0.0))) as server:
        service = AnnotationService(engine, publisher)
        backend = OpenAICompatibleBackend(server.base_url, "simulated-judge", api_key=API_KEY, backoff=0.01)
        config = JudgeWorkerConfig("simulated-judge", (source,), JudgeConfig(concurrency=4), group=uuid.uuid4().hex)
        worker = JudgeWorker(broker.bootstrap, service, backend, config)
        stop = threading.Event()
        thread = threading.Thread(target=run_worker, args=(worker, stop), daemon=True)
        thread.start()
        try:
            wait_for(lambda: all(service.ranking(p) is not None for p in pids), "both rankings")
            rankings = events(topics.RANKINGS, set(pids), lambda found: len(found) >= 2)
            handled = worker.consumer.stats.handled
            for sample in samples:  # redelivered: nothing is judged, stored or announced again
                publisher.publish(topics.SAMPLES, sample.sample.prompt_id, sample)
            publisher.flush()
            wait_for(lambda: worker.consumer.stats.handled >= handled + 2 and worker.prompts.empty(), "the replays")
            time.sleep(0.5)  # the judging thread takes the replayed prompts' (no) open tasks
        finally:
            stop.set()
            thread.join(30)
            worker.close()
    for item, pid in zip(items, pids, strict=True):
        stored = stored_annotations(engine, pid)
        n = len(item.responses)
        assert len(stored) == n * (n - 1) // 2 and {a.kind for a in stored} == {"ai"}
        assert {a.annotator for a in stored} == {"judge:simulated-judge"}
        assert {a.id for a in stored} == {annotation_id(pid, *pair_of(a.result), "simulated-judge") for a in stored}
        assert agrees(service.ranking(pid).rank, dict(item.rank))  # type: ignore[union-attr]
        with session_scope(engine) as session:
            assert {t.status for t in repository.tasks_for(session, pid)} == {"done"}
    assert {key for key, _ in rankings} == set(pids)
    service.resolve(pids[0])  # a marker after the replays: had they announced anything, it would come first
    events(topics.RANKINGS, {pids[0]}, lambda found: len(found) >= 2)
    assert len(events(topics.RANKINGS, {pids[0]})) == 2 and len(events(topics.ANNOTATIONS, {pids[0]})) == 6
    assert worker.stats.submitted == 9 and worker.stats.undecided == 0
    service.close()
    written = judge_log.getvalue()
    assert API_KEY not in written and all(json.loads(line)["service"] == "judge" for line in written.splitlines())


def test_undecided_pairs_close_their_task_and_failed_calls_leave_it_open(
    engine: Engine, broker: EmbeddedBroker, unique: Any
) -> None:
    items = bench(unique)
    service = AnnotationService(engine)
    pids = []
    with session_scope(engine) as session:
        for item in items:
            pid, _ = repository.add_sample(session, item.input, [(r.id, r.content) for r in item.responses], ["语言"])
            pids.append(pid)
    down = OpenAICompatibleBackend("http://127.0.0.1:9/v1", "simulated-judge", max_retries=0, timeout=2)
    worker = JudgeWorker(broker.bootstrap, service, down, JudgeWorkerConfig("simulated-judge"))
    service.create_tasks(pids[1], 2)
    worker.judge(service.open_tasks(pids[1], 2))
    assert worker.stats.unavailable == 3 and len(service.open_tasks(pids[1], 2)) == 3  # asked again later
    worker.close()
    with JudgeServer(SimulatedJudge(items, SimulatedJudgeConfig(noise=0.5, seed=3))) as server:
        noisy = OpenAICompatibleBackend(server.base_url, "simulated-judge", backoff=0.01)
        both = JudgeWorkerConfig("simulated-judge", judge=JudgeConfig(both_orders=True, seed=1))
        worker = JudgeWorker(broker.bootstrap, service, noisy, both)
        service.create_tasks(pids[0], 2)
        worker.judge(service.open_tasks(pids[0], 2))
        worker.close()
    assert worker.stats.undecided > 0 and worker.stats.submitted + worker.stats.undecided == 6
    assert len(stored_annotations(engine, pids[0])) == worker.stats.submitted  # an inconsistent pair is left out
    assert service.open_tasks(pids[0], 2) == [] and service.ranking(pids[0]) is not None
