"""Annotation reacting to events, on the real broker and on SQLite and PostgreSQL: sample events -> tasks,
ListTasks, annotations and rankings published (at-least-once, through the outbox), replays that change nothing."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.roles import ADMIN, ANNOTATOR
from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc, common_pb2
from services.annotation.intake import IntakeConfig, SampleIntake
from services.annotation.server import servicer_host
from services.annotation.service import AnnotationService
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.bus.relay import RelayConfig, RelayError
from services.channels import open_channel
from services.hosting import HostConfig
from services.store import outbox, repository
from services.store.accounts import AccountBook
from services.store.db import session_scope
from services.store.models import AnnotationTask, Prompt
from tests.services.accounts import account, bearer, give

FIVE = [(f"r{i}", f"第{i}个回答") for i in range(1, 6)]


def drain(consumer: EventConsumer, timeout: float = 40.0) -> None:
    """Poll until the consumer has handled everything the topic held when called."""
    deadline = time.monotonic() + timeout
    while consumer.membership.joining or not consumer.consumer.assignment():
        assert time.monotonic() < deadline, "the consumer joined no group"
        consumer.poll_once(200)
    ends = consumer.consumer.end_offsets(list(consumer.consumer.assignment()))
    while any(consumer.consumer.position(tp) < end for tp, end in ends.items()):
        assert time.monotonic() < deadline, "the consumer did not reach the end of the topic"
        consumer.poll_once(200)


def tasks_of(engine: Engine, prompt_id: str) -> list[tuple[list[str], str]]:
    with session_scope(engine) as session:
        return sorted((t.response_keys, t.status) for t in repository.tasks_for(session, prompt_id))


def order(*groups: list[str]) -> pb.OrderResult:
    return pb.OrderResult(groups=[pb.TieGroup(ids=g) for g in groups])


@pytest.fixture
def publisher(broker: EmbeddedBroker) -> Iterator[Publisher]:
    running = Publisher(broker.bootstrap)
    yield running
    running.close()


@pytest.fixture
def service(engine: Engine, publisher: Publisher) -> Iterator[AnnotationService]:
    running = AnnotationService(engine, publisher, RelayConfig(sweep_every=0.5))
    yield running
    running.close()


@pytest.fixture
def stub(service: AnnotationService, engine: Engine) -> Iterator[Any]:
    """The service's stub; its calls come from an admin, or from the annotator `as_` names."""
    grpc_host = servicer_host(service, HostConfig(port=0), AccountBook(engine)).start()
    with open_channel(f"127.0.0.1:{grpc_host.port}", token=account(engine, "组长", ADMIN)) as channel:
        yield annotation_pb2_grpc.AnnotationServiceStub(channel)
    grpc_host.stop(0)


def test_sample_events_open_triple_and_pair_tasks_once_for_matching_sources(
    engine: Engine, broker: EmbeddedBroker, publisher: Publisher, make_sample: Callable[..., Any], unique: Any
) -> None:
    ingested, fresh, other = unique("比较这五个回答"), unique("新来的题"), unique("留给AI的题")
    with session_scope(engine) as session:  # ingestion stored it and announced it
        known, _ = repository.add_sample(session, ingested, FIVE, ["推理"], source="open.jsonl")
    history = [common_pb2.Message(role="user", content="你好"), common_pb2.Message(role="assistant", content="你好！")]
    sent = [
        make_sample(ingested, FIVE, "open.jsonl", prompt_id=known),
        make_sample(other, FIVE[:3], "human.jsonl"),
        make_sample(fresh, FIVE[:3], "open-2.jsonl", system_prompt="你是助手", history=history),
        make_sample("坏\x00题", FIVE[:3], "open.jsonl"),  # the store refuses NUL: skipped, the rest goes on
        make_sample(ingested, FIVE, "open.jsonl", prompt_id=known),  # redelivered
    ]
    for event in sent:
        publisher.publish(topics.SAMPLES, event.sample.prompt_id or "x", event)
    publisher.flush()
    service = AnnotationService(engine)
    sources = IntakeConfig(human_sources=("open*",), ai_sources=("human.jsonl",), group=uuid.uuid4().hex)
    intake = SampleIntake(broker.bootstrap, service, sources)
    try:
        drain(intake.consumer)
    finally:
        intake.close()
    assert [keys for keys, _ in tasks_of(engine, known)] == sorted(
        [["r1", "r2", "r3"], ["r2", "r3", "r4"], ["r3", "r4", "r5"], ["r4", "r5", "r1"], ["r5", "r1", "r2"]]
    )
    with session_scope(engine) as session:
        mine = [ingested, fresh, other]  # the topic also holds other tests' samples
        stored = {p.text: p for p in session.scalars(select(Prompt).where(Prompt.text.in_(mine)))}
        assert set(stored) == {ingested, fresh, other}
        assert stored[fresh].system_prompt == "你是助手" and len(stored[fresh].history or []) == 2
        ids = [known, stored[fresh].id]
        count = select(func.count()).select_from(AnnotationTask).where(AnnotationTask.prompt_id.in_(ids))
        assert session.scalar(count) == 6  # nothing twice
    assert tasks_of(engine, stored[fresh].id) == [(["r1", "r2", "r3"], "open")]
    pairs = [(["r1", "r2"], "open"), (["r1", "r3"], "open"), (["r2", "r3"], "open")]
    assert tasks_of(engine, stored[other].id) == pairs  # the AI source's prompt: the judge's pairs, no triple


def test_list_tasks_gives_what_an_annotator_reads(stub: Any, service: AnnotationService, engine: Engine) -> None:
    with session_scope(engine) as session:
        history = [("user", "上一轮"), ("assistant", "好的")]
        people, _ = repository.add_sample(session, "哪个好", FIVE, ["语言"], "你是助手", "open.jsonl", history=history)
        machine, _ = repository.add_sample(session, "选一个", FIVE[:3], ["代码"], source="ai.jsonl")
    service.create_tasks(people, 3)
    service.create_tasks(machine, 2)
    listed = stub.ListTasks(pb.ListTasksRequest(prompt_id=people), timeout=10).tasks
    assert len(listed) == 5
    first = listed[0]
    assert first.sample.prompt == "哪个好" and first.sample.system_prompt == "你是助手"
    assert [(m.role, m.content) for m in first.sample.history] == history and first.sample.source == "open.jsonl"
    assert [r.id for r in first.sample.responses] == list(first.task.response_ids)  # the task's own, in its order
    assert all(r.content == dict(FIVE)[r.id] for t in listed for r in t.sample.responses)
    pairs = stub.ListTasks(pb.ListTasksRequest(group_size=2), timeout=10).tasks
    assert len(pairs) == 3 and {t.task.prompt_id for t in pairs} == {machine}
    head = stub.ListTasks(pb.ListTasksRequest(limit=2), timeout=10).tasks
    assert [t.task.task_id for t in head] == [t.task.task_id for t in listed[:2]]  # oldest first
    done = first.task
    submit = pb.Annotation(
        annotation_id="a", prompt_id=people, task_id=done.task_id, annotator="张三", kind=pb.ANNOTATOR_KIND_HUMAN
    )
    submit.order.CopyFrom(order(*[[k] for k in done.response_ids]))
    token = account(engine, "张三", ANNOTATOR)
    give(engine, "张三", done.task_id)
    stub.SubmitAnnotation(submit, timeout=10, metadata=bearer(token))
    assert done.task_id not in {t.task.task_id for t in stub.ListTasks(pb.ListTasksRequest(), timeout=10).tasks}
    for request, code in [
        (pb.ListTasksRequest(limit=1001), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.ListTasksRequest(group_size=4), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.ListTasksRequest(prompt_id="没有这道题"), grpc.StatusCode.NOT_FOUND),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            stub.ListTasks(request, timeout=10)
        assert info.value.code() == code


# Orders of the five circular triples that contradict each other: r1 > r2 > r3 > r4 > r5, yet r4 > r5 > r1.
CYCLE = [[["r1"], ["r2"], ["r3"]], [["r2"], ["r3"], ["r4"]], [["r3"], ["r4"], ["r5"]], [["r4"], ["r5"], ["r1"]]]


def test_annotations_and_the_ranking_are_published_once(
    stub: Any, service: AnnotationService, engine: Engine, events: Any, unique: Any
) -> None:
    with session_scope(engine) as session:
        pid, _ = repository.add_sample(session, unique("五个回答排个序"), FIVE, ["推理"])
    tasks = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=pid, group_size=3), timeout=10).tasks
    orders = {tuple(g[0] for g in o): o for o in CYCLE}
    requests = []
    for n, task in enumerate(tasks):
        groups = orders.get(tuple(task.response_ids), [[k] for k in sorted(task.response_ids)])
        requests.append(
            pb.Annotation(
                annotation_id=f"{pid[:8]}-{n}",
                prompt_id=pid,
                task_id=task.task_id,
                annotator="李四",
                kind=pb.ANNOTATOR_KIND_HUMAN,
                order=order(*groups),
                discarded=[],
            )
        )
    who = bearer(account(engine, "李四", ANNOTATOR))
    give(engine, "李四", *[t.task_id for t in tasks])
    assert stub.SubmitAnnotation(requests[0], timeout=10, metadata=who).created
    [(_, first)] = events(topics.ANNOTATIONS, {pid}, lambda found: len(found) >= 1)
    assert first.annotation.annotation_id == requests[0].annotation_id and first.annotation.task_id == tasks[0].task_id
    assert [list(g.ids) for g in first.annotation.order.groups] == [list(g.ids) for g in requests[0].order.groups]
    assert first.annotation.kind == pb.ANNOTATOR_KIND_HUMAN and first.header.producer == "annotation"
    for request in requests[1:]:
        assert stub.SubmitAnnotation(request, timeout=10, metadata=who).created
    assert not stub.SubmitAnnotation(
        requests[-1], timeout=10, metadata=who
    ).created  # a replay: stores and announces nothing
    resolved = stub.Resolve(pb.ResolveRequest(prompt_id=pid), timeout=10)  # announces the same ranking again
    events(topics.RANKINGS, {pid}, lambda found: len(found) >= 2)  # Resolve's: whatever came before is out too
    rankings = [e for _, e in events(topics.RANKINGS, {pid})]
    annotations = [e for _, e in events(topics.ANNOTATIONS, {pid})]
    assert len(rankings) == 2 and len(annotations) == 5  # once each: completion, Resolve; no replay
    assert dict(rankings[0].ranking.rank) == dict(resolved.ranking.rank) == service.ranking(pid).rank  # type: ignore[union-attr]
    assert rankings[0].conflicts == resolved.conflicts > 0 and rankings[0].merged_nodes == resolved.merged_nodes
    assert len({e.header.event_id for e in rankings + annotations}) == 7


def test_a_broker_outage_delays_events_and_loses_nothing(engine: Engine, unique: Any, reader: Any) -> None:
    """A broker that stops answering (SIGSTOP: state kept, as a network partition would) and comes back."""
    broker = EmbeddedBroker().start()
    broker.create_topics(topics.with_dead_letters(), partitions=1)
    assert broker.process is not None
    publisher = Publisher(broker.bootstrap, max_block_ms=2000)
    service = AnnotationService(engine, publisher, RelayConfig(sweep_every=3600, ack_timeout=2.0, max_backoff=1.0))
    try:
        with session_scope(engine) as session:
            pid, _ = repository.add_sample(session, unique("断网了"), FIVE[:3], ["知识"])
        [(task, keys)] = service.create_tasks(pid, 3)
        give(engine, "王五", task)
        broker.process.send_signal(signal.SIGSTOP)
        try:
            assert service.submit("outage-1", pid, "王五", "human", {"order": [[k] for k in keys]}, [], task)
            assert service.ranking(pid) is not None  # stored at once, the broker notwithstanding
            with session_scope(engine) as session:
                assert outbox.waiting(session) == 2  # the annotation's event and the ranking's wait
            with pytest.raises(RelayError):
                service.relay.drain()  # type: ignore[union-attr]
        finally:
            broker.process.send_signal(signal.SIGCONT)
        [(_, annotation), *_] = reader(broker.bootstrap, topics.ANNOTATIONS, {pid}, lambda found: len(found) >= 1)
        [(_, ranking), *_] = reader(broker.bootstrap, topics.RANKINGS, {pid}, lambda found: len(found) >= 1)
        assert annotation.annotation.annotation_id == "outage-1"
        assert dict(ranking.ranking.rank) == {keys[0]: 1, keys[1]: 2, keys[2]: 3}
        deadline = time.monotonic() + 30
        while True:  # the relay deletes them once acknowledged
            with session_scope(engine) as session:
                if outbox.waiting(session) == 0:
                    break
            assert time.monotonic() < deadline, "the outbox was not emptied"
            time.sleep(0.1)
    finally:
        service.close()
        publisher.close(timeout=5)
        broker.stop()
