"""The AI judge worker as a pure gRPC client: a real annotation server on SQLite and PostgreSQL, the stand-in LLM
judge (our real client over HTTP), and nothing else given to the judge but its service account's token. Open pairs
-> AI annotations -> the ranking and its event; triples left to people; replays change nothing; an undecidable pair
closed without a verdict, a failed one left open; a token that may not judge stops it."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from cheems.roles import SCORER_CLIENT, SERVICE
from services.annotation.judge.client import JudgeRefused, PairTasks
from services.annotation.judge.pairwise import JudgeConfig, OpenAICompatibleBackend
from services.annotation.judge.worker import JudgeWorker, JudgeWorkerConfig, annotation_id
from services.annotation.server import servicer_host
from services.annotation.service import AnnotationService
from services.annotation.simulation.judge import JudgeServer, SimulatedJudge, SimulatedJudgeConfig
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.channels import open_channel
from services.hosting import HostConfig
from services.observe.logs import setup_logging
from services.store import repository
from services.store.accounts import AccountBook
from services.store.db import session_scope
from services.store.models import Annotation
from tests.services.accounts import account, give

API_KEY = "sk-judge-Q7vK2mN9xR4tW8yB6pL3Hs1Jc5Fg0"  # sent to the endpoint as `authorization: Bearer ...`


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


def stored_annotations(engine: Engine, prompt_id: str) -> list[Annotation]:
    with session_scope(engine) as session:
        return list(session.scalars(select(Annotation).where(Annotation.prompt_id == prompt_id)))


def statuses(engine: Engine, prompt_id: str, kind: str) -> list[str]:
    with session_scope(engine) as session:
        return [t.status for t in repository.tasks_for(session, prompt_id) if t.kind == kind]


def add(engine: Engine, item: BenchItem) -> str:
    with session_scope(engine) as session:
        pid, _ = repository.add_sample(session, item.input, [(r.id, r.content) for r in item.responses], item.category)
    return pid


@pytest.fixture
def publisher(broker: EmbeddedBroker) -> Iterator[Publisher]:
    running = Publisher(broker.bootstrap)
    yield running
    running.close()


@pytest.fixture
def service(engine: Engine, publisher: Publisher) -> Iterator[AnnotationService]:
    running = AnnotationService(engine, publisher)
    yield running
    running.close()


@pytest.fixture
def target(service: AnnotationService, engine: Engine) -> Iterator[str]:
    """host:port of the annotation service: all the judge is told, with its token."""
    grpc_host = servicer_host(service, HostConfig(port=0), AccountBook(engine)).start()
    yield f"127.0.0.1:{grpc_host.port}"
    grpc_host.stop(0)


@pytest.fixture
def pairs_of(target: str) -> Iterator[Callable[[str], PairTasks]]:
    """pairs_of(token) -> the annotation service as that account's judge sees it."""
    channels: list[Any] = []

    def open_for(token: str) -> PairTasks:
        channels.append(open_channel(target, token=token))
        return PairTasks(channels[-1], timeout=10)

    yield open_for
    for channel in channels:
        channel.close()


@pytest.fixture
def judge_log() -> io.StringIO:
    """What the judge worker's process would write at debug level, as JSON lines (services.observe.logs)."""
    out = io.StringIO()
    setup_logging("judge", log_format="json", level="DEBUG", stream=out)  # undone by tests/conftest.py
    return out


def test_open_pairs_are_judged_into_a_ranking_with_only_a_token(
    engine: Engine,
    service: AnnotationService,
    pairs_of: Callable[[str], PairTasks],
    events: Any,
    unique: Any,
    judge_log: io.StringIO,
) -> None:
    items = bench(unique)
    pids = [add(engine, item) for item in items]
    for pid in pids:
        service.create_tasks(pid, 2)  # what the intake opens for a sample of an AI source
    people = service.create_tasks(pids[0], 3)  # and people's triples of the first, one held by 张三
    give(engine, "张三", people[0][0])
    tasks = pairs_of(account(engine, "judge-bot", SERVICE))
    stale = tasks.open_pairs(1)
    with JudgeServer(SimulatedJudge(items, SimulatedJudgeConfig(noise=0.0))) as server:
        backend = OpenAICompatibleBackend(server.base_url, "simulated-judge", api_key=API_KEY, backoff=0.01)
        worker = JudgeWorker(tasks, backend, JudgeWorkerConfig("simulated-judge", JudgeConfig(concurrency=4)))
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 60
            while any("open" in statuses(engine, pid, "pair") for pid in pids):
                assert time.monotonic() < deadline and thread.is_alive(), "the pairs were not judged"
                time.sleep(0.1)
        finally:
            stop.set()
            thread.join(30)
        assert worker.look() == 0  # again: nothing open, nothing asked, nothing stored
        worker.judge(stale)  # listed before another replica (here: itself) judged it: checked, not asked again
        worker.close()
    for item, pid in zip(items, pids, strict=True):
        stored = stored_annotations(engine, pid)
        n = len(item.responses)
        assert len(stored) == n * (n - 1) // 2 and {(a.kind, a.annotator) for a in stored} == {("ai", "judge-bot")}
        pairs = [a.result.get("equal") or [a.result["better"], a.result["worse"]] for a in stored]
        assert {a.id for a in stored} == {annotation_id(pid, *p, "simulated-judge") for p in pairs}
    assert statuses(engine, pids[0], "triple") == ["open"] * len(people)  # people's work stays theirs
    assert service.ranking(pids[0]) is None  # its triples are open: not resolved yet
    ranked = service.ranking(pids[1])
    assert ranked is not None and agrees(ranked.rank, dict(items[1].rank))
    assert [k for k, _ in events(topics.RANKINGS, {pids[1]}, lambda found: len(found) >= 1)] == [pids[1]]
    assert worker.stats.submitted == 9 and worker.stats.undecided == 0 and worker.stats.gone == 1
    written = judge_log.getvalue()
    assert API_KEY not in written and all(json.loads(line)["service"] == "judge" for line in written.splitlines())


def test_undecided_pairs_close_their_task_and_failed_calls_leave_it_open(
    engine: Engine, service: AnnotationService, pairs_of: Callable[[str], PairTasks], unique: Any
) -> None:
    items = bench(unique)
    pids = [add(engine, item) for item in items]
    tasks = pairs_of(account(engine, "judge-bot", SERVICE))
    down = OpenAICompatibleBackend("http://127.0.0.1:9/v1", "simulated-judge", max_retries=0, timeout=2)
    worker = JudgeWorker(tasks, down, JudgeWorkerConfig("simulated-judge"))
    service.create_tasks(pids[1], 2)
    assert worker.look() == 3 and worker.stats.unavailable == 3 and statuses(engine, pids[1], "pair") == ["open"] * 3
    assert worker.look() == 0  # asked again only after retry_every
    worker.close()
    with JudgeServer(SimulatedJudge(items, SimulatedJudgeConfig(noise=0.5, seed=3))) as server:
        noisy = OpenAICompatibleBackend(server.base_url, "simulated-judge", backoff=0.01)
        both = JudgeWorkerConfig("simulated-judge", judge=JudgeConfig(both_orders=True, seed=1))
        worker = JudgeWorker(tasks, noisy, both)
        service.create_tasks(pids[0], 2)
        worker.judge([t for t in tasks.open_pairs(100) if t.prompt_id == pids[0]])
        worker.close()
    assert worker.stats.undecided > 0 and worker.stats.submitted + worker.stats.undecided == 6
    assert len(stored_annotations(engine, pids[0])) == worker.stats.submitted  # an inconsistent pair is left out
    assert statuses(engine, pids[0], "pair") == ["done"] * 6 and service.ranking(pids[0]) is not None


@pytest.mark.parametrize("role", [SCORER_CLIENT, ""])
def test_a_token_that_may_not_judge_stops_the_worker(
    engine: Engine, service: AnnotationService, pairs_of: Callable[[str], PairTasks], unique: Any, role: str
) -> None:
    """An account of another role (PERMISSION_DENIED), or a token no account has (UNAUTHENTICATED): `run` raises, so
    the process exits rather than polling in vain."""
    service.create_tasks(add(engine, bench(unique)[1]), 2)
    token = account(engine, "not-a-judge", role) if role else "chm_" + "x9Q" * 16
    worker = JudgeWorker(pairs_of(token), OpenAICompatibleBackend("http://127.0.0.1:9/v1", "m"), JudgeWorkerConfig("m"))
    try:
        with pytest.raises(JudgeRefused) as refused:
            worker.run(threading.Event())
    finally:
        worker.close()
    assert refused.value.reason == ("permission_denied" if role else "unauthenticated")
