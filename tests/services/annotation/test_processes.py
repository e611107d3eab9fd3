"""The annotation loop as real processes on the real broker: `cheems service annotation --bootstrap` killed
(SIGKILL) mid-stream and restarted ends with the same tasks and rankings; `cheems dev judge-server` and
`cheems service judge` (with only its token) turn sample events into a ranking; `cheems annotate simulate-humans`
empties the queue."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from cheems.credentials import read_secret
from cheems.formats.cheemsbench import BenchItem, write_bench
from cheems.formats.responses import Response
from cheems.processes.ports import free_port
from cheems.roles import ANNOTATOR
from cheems.roles import SERVICE as SERVICE_ROLE
from services.annotation.algorithm.protocol import triple_tasks
from services.annotation.server import SERVICE
from services.annotation.simulation.annotators import SimulationConfig, simulate_humans
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.hosting import LIVENESS
from services.store import repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import Annotation, AnnotationTask, Ranking
from services.store.validate import prompt_id_for
from system.accounts import provision
from tests.services.processes import CHEEMS, wait_for
from tests.services.processes import Service as Process

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []

    def run(*args: str, env: dict[str, str] | None = None) -> Process:
        started.append(Process(args, tmp_path / f"p{len(started)}", env))
        return started[-1]

    yield run
    for each in started:
        if each.process.poll() is None:
            each.process.kill()
            each.process.wait()


def items(n: int, source: str) -> list[BenchItem]:
    tag = uuid.uuid4().hex[:8]
    rank = {"r1": 2, "r2": 1, "r3": 3, "r4": 3}
    return [
        BenchItem(f"{source}第{i}题（{tag}）", tuple(Response(k, f"第{i}题的回答{k}") for k in rank), rank, ("推理",))
        for i in range(n)
    ]


def publish_samples(bootstrap: str, bench: list[BenchItem], source: str, make_sample: Any) -> list[str]:
    publisher = Publisher(bootstrap)
    pids = []
    for item in bench:
        event = make_sample(item.input, [(r.id, r.content) for r in item.responses], source)
        event.sample.prompt_id = prompt_id_for(item.input)
        publisher.publish(topics.SAMPLES, event.sample.prompt_id, event)
        pids.append(event.sample.prompt_id)
    publisher.flush()
    publisher.close()
    return pids


def counts(url: str, pids: list[str]) -> tuple[int, int, int]:
    """(prompts with tasks, tasks, rankings) of these prompts."""
    engine = create_engine_for(StoreConfig(url))
    try:
        with session_scope(engine) as session:
            tasks = select(AnnotationTask.prompt_id).where(AnnotationTask.prompt_id.in_(pids))
            rankings = select(func.count()).select_from(Ranking).where(Ranking.prompt_id.in_(pids))
            found = list(session.scalars(tasks))
            return len(set(found)), len(found), int(session.scalar(rankings) or 0)
    finally:
        engine.dispose()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite: the judge processes' test below
def test_a_killed_annotation_service_restarts_with_the_same_tasks_and_rankings(
    db_url: str, broker: EmbeddedBroker, start: Callable[..., Process], make_sample: Any, reader: Any, tmp_path: Path
) -> None:
    upgrade(db_url)
    bench = items(10, "open")
    write_bench(tmp_path / "bench.jsonl", bench)
    pids = publish_samples(broker.bootstrap, bench, "open.jsonl", make_sample)
    port = free_port()
    args = ["service", "annotation", "--db", db_url, "--bootstrap", broker.bootstrap, "--port", str(port)]
    args += ["--http-port", "0"]  # the page on any free port: 8053 may be another test's
    # 1 s a prompt: the kill must come while the intake still runs, on a loaded CI machine too (0.3 s raced)
    first = start(*args, "--human-sources", "open*", "--intake-delay", "1.0")
    first.wait_serving(port, ["", SERVICE, LIVENESS])
    wait_for(lambda: counts(db_url, pids)[0] >= 3, "the first prompts' tasks", alive=first)
    people = provision(db_url, tmp_path / "people", {f"sim-{n}": ANNOTATOR for n in range(1, 5)})  # token files
    accounts = [(name, read_secret(path)) for name, path in people.items()]
    done = simulate_humans(  # 4 triples: 4 people
        f"127.0.0.1:{port}", bench, SimulationConfig(annotators=4, noise=0.0), accounts
    )
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=30)
    prompts, _, ranked = counts(db_url, pids)
    assert done.submitted > 0 and 0 < ranked <= prompts < len(bench), "killed mid-stream"

    second = start(*args, "--human-sources", "open*")
    second.wait_serving(port, ["", SERVICE, LIVENESS])
    wait_for(lambda: counts(db_url, pids)[0] == len(bench), "every prompt's tasks", alive=second)
    humans = ["annotate", "simulate-humans", "--annotation-url", f"127.0.0.1:{port}", "--annotators", "4"]
    humans += ["--token-dir", str(tmp_path / "people")]
    run = subprocess.run(
        [*CHEEMS, *humans, "--bench", str(tmp_path / "bench.jsonl"), "--noise", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["submitted"] == 4 * len(bench) - done.submitted
    found = reader(broker.bootstrap, topics.RANKINGS, set(pids), lambda got: {k for k, _ in got} == set(pids))
    assert second.stop() == 0, second.output()

    engine = create_engine_for(StoreConfig(db_url))
    try:
        with session_scope(engine) as session:
            for item, pid in zip(bench, pids, strict=True):
                tasks = repository.tasks_for(session, pid)
                assert sorted(t.response_keys for t in tasks) == sorted(triple_tasks(sorted(item.rank)))
                assert {t.status for t in tasks} == {"done"}
                ranking = session.get(Ranking, pid)
                assert ranking is not None and ranking.rank == {"r1": 2, "r2": 1, "r3": 3, "r4": 3}
                last = [e for k, e in found if k == pid][-1]
                assert dict(last.ranking.rank) == ranking.rank
    finally:
        engine.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # PostgreSQL: the test above
def test_the_judge_process_turns_pairs_into_rankings_with_only_its_token(
    db_url: str, broker: EmbeddedBroker, start: Callable[..., Process], make_sample: Any, tmp_path: Path
) -> None:
    """The annotation service opens the pairs of an AI source's samples; `cheems service judge` is told the
    service's address and its token file, and nothing of the store or the broker (its environment has neither)."""
    upgrade(db_url)
    [token] = provision(db_url, tmp_path / "accounts", {"judge": SERVICE_ROLE}).values()
    bench = items(3, "ai")
    write_bench(tmp_path / "ai.jsonl", bench)
    server = start("dev", "judge-server", "--bench", str(tmp_path / "ai.jsonl"), "--noise", "0", "--port", "0")
    port, health = free_port(), free_port()
    annotation = ["service", "annotation", "--db", db_url, "--bootstrap", broker.bootstrap, "--port", str(port)]
    service = start(*annotation, "--http-port", "-1", "--human-sources", "open*", "--ai-sources", "ai*")
    wait_for(lambda: "judge server at" in server.out.read_text(), "the judge server", alive=server)
    base_url = re.search(r"judge server at (\S+):", server.out.read_text()).group(1)  # type: ignore[union-attr]
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("CHEEMS_DATABASE", "CHEEMS_KAFKA"))}
    judge = start(
        *["service", "judge", "--base-url", base_url, "--model", "simulated-judge", "--token-file", str(token)],
        *["--annotation-url", f"127.0.0.1:{port}", "--health-port", str(health), "--concurrency", "4"],
        env=bare,
    )
    service.wait_serving(port, ["", SERVICE, LIVENESS])
    judge.wait_serving(health, ["", "cheems.annotation.judge", LIVENESS])
    pids = publish_samples(broker.bootstrap, bench, "ai.jsonl", make_sample)
    wait_for(lambda: counts(db_url, pids)[2] == len(bench), "the rankings", alive=judge)
    assert judge.stop() == 0, judge.output()
    assert service.stop() == 0, service.output()
    assert server.stop() == 0, server.output()
    assert f"judge: health on :{health}" in judge.out.read_text()
    engine = create_engine_for(StoreConfig(db_url))
    try:
        with session_scope(engine) as session:
            for pid in pids:
                assert session.get(Ranking, pid).rank == {"r1": 2, "r2": 1, "r3": 3, "r4": 3}  # type: ignore[union-attr]
                kinds = {(t.kind, t.status) for t in repository.tasks_for(session, pid)}
                assert kinds == {("pair", "done")}  # an AI source: no triples
            judged = {a.annotator for a in session.scalars(select(Annotation).where(Annotation.prompt_id.in_(pids)))}
            assert judged == {"judge"}
    finally:
        engine.dispose()
