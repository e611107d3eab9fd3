"""Each kind of annotation closes only its own kind of task, over a real gRPC server on SQLite and PostgreSQL: a
service account's AI annotation names an open pair task (never a person's triple, never none), a person's human
annotation a triple they hold; the kind is the caller's role; CloseTask is a service's, on pairs only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.roles import ADMIN, ANNOTATOR, OPERATOR, SCORER_CLIENT, SERVICE
from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc
from services.annotation.server import host
from services.hosting import HostConfig
from services.store import repository
from services.store.accounts import AccountBook
from services.store.db import session_scope
from services.store.models import Annotation, AnnotationTask
from tests.services.accounts import give

Call = Callable[..., Any]


@pytest.fixture
def stub(engine: Engine) -> Iterator[Any]:
    grpc_host = host(engine, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_host.port}")
    yield annotation_pb2_grpc.AnnotationServiceStub(channel)
    channel.close()
    grpc_host.stop(0)


@pytest.fixture
def prompt(engine: Engine) -> str:
    with session_scope(engine) as session:
        pid, _ = repository.add_sample(
            session, "哪个回答更好？", [("r1", "好。"), ("r2", "很好。"), ("r3", "不好。")], ["语言"]
        )
    return pid


def tasks(engine: Engine, prompt_id: str, kind: str) -> list[AnnotationTask]:
    with session_scope(engine) as session:
        return [t for t in repository.tasks_for(session, prompt_id) if t.kind == kind]


def stored(engine: Engine) -> int:
    with session_scope(engine) as session:
        return int(session.scalar(select(func.count()).select_from(Annotation)) or 0)


def refused(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def verdict(prompt_id: str, n: str, task_id: str = "", kind: int = pb.ANNOTATOR_KIND_AI, a: str = "r1", b: str = "r2"):  # type: ignore[no-untyped-def]
    pair = pb.PairResult(a=a, b=b, verdict=pb.VERDICT_A_BETTER)
    return pb.Annotation(annotation_id=n, prompt_id=prompt_id, task_id=task_id, kind=kind, pair=pair)


def test_a_services_ai_annotation_cannot_close_a_persons_triple(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    ops, judge, alice = as_("ops", OPERATOR), as_("judge", SERVICE), as_("alice")
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10, metadata=ops)
    [held] = stub.ListTasks(pb.ListTasksRequest(group_size=3), timeout=10, metadata=alice).tasks  # alice's now
    a, b, c = held.task.response_ids
    code, details = refused(
        lambda: stub.SubmitAnnotation(verdict(prompt, "ai-1", held.task.task_id, a=a, b=b), timeout=10, metadata=judge)
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED and "pair" in details and held.task.task_id in details
    assert stored(engine) == 0 and {t.status for t in tasks(engine, prompt, "triple")} == {"open"}
    mine = pb.Annotation(
        annotation_id="alice-1", prompt_id=prompt, task_id=held.task.task_id, kind=pb.ANNOTATOR_KIND_HUMAN,
        order=pb.OrderResult(groups=[pb.TieGroup(ids=[a]), pb.TieGroup(ids=[b, c])]),
    )  # fmt: skip
    assert stub.SubmitAnnotation(mine, timeout=10, metadata=alice).created  # the person still annotates it
    code, _ = refused(lambda: stub.CloseTask(pb.CloseTaskRequest(task_id=held.task.task_id, reason="x"), timeout=10,
                                             metadata=judge))  # fmt: skip
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_an_ai_annotation_names_an_open_pair_task_of_its_prompt(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    ops, judge = as_("ops", OPERATOR), as_("judge", SERVICE)
    pairs = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=2), timeout=10, metadata=ops).tasks
    with session_scope(engine) as session:
        other, _ = repository.add_sample(session, "另一个问题", [("r1", "甲。"), ("r2", "乙。")], ["语言"])
    [foreign] = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=other, group_size=2), timeout=10, metadata=ops).tasks
    first = pairs[0]
    a, b = first.response_ids

    def submit(n: str, task_id: str) -> Any:
        return stub.SubmitAnnotation(verdict(prompt, n, task_id, a=a, b=b), timeout=10, metadata=judge)

    code, details = refused(lambda: submit("none", ""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "task_id is required" in details
    assert refused(lambda: submit("unknown", "f" * 64))[0] == grpc.StatusCode.NOT_FOUND
    assert refused(lambda: submit("foreign", foreign.task_id))[0] == grpc.StatusCode.NOT_FOUND
    assert stored(engine) == 0
    assert submit("ai-1", first.task_id).created
    assert not submit("ai-1", first.task_id).created  # a replay: answered, nothing stored again
    code, _ = refused(lambda: submit("ai-2", first.task_id))  # the pair is closed: it takes one verdict
    assert code == grpc.StatusCode.FAILED_PRECONDITION and stored(engine) == 1


@pytest.mark.parametrize(
    ("role", "kind", "code"),
    [
        (ANNOTATOR, pb.ANNOTATOR_KIND_AI, grpc.StatusCode.PERMISSION_DENIED),  # a person's token submitting kind ai
        (ADMIN, pb.ANNOTATOR_KIND_AI, grpc.StatusCode.PERMISSION_DENIED),
        (SERVICE, pb.ANNOTATOR_KIND_HUMAN, grpc.StatusCode.PERMISSION_DENIED),
        (OPERATOR, pb.ANNOTATOR_KIND_AI, grpc.StatusCode.PERMISSION_DENIED),
        (SCORER_CLIENT, pb.ANNOTATOR_KIND_AI, grpc.StatusCode.PERMISSION_DENIED),
        (SERVICE, pb.ANNOTATOR_KIND_UNSPECIFIED, grpc.StatusCode.OK),  # the kind is the role's: AI
        (SERVICE, pb.ANNOTATOR_KIND_AI, grpc.StatusCode.OK),
    ],
)
def test_the_kind_is_the_callers_role(
    stub: Any, as_: Any, prompt: str, engine: Engine, role: str, kind: int, code: grpc.StatusCode
) -> None:
    ops, who = as_("ops", OPERATOR), as_("caller", role)
    [pair, *_] = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=2), timeout=10, metadata=ops).tasks
    if role in (ANNOTATOR, ADMIN):
        give(engine, "caller", pair.task_id)  # even holding it
    request = verdict(prompt, "v1", pair.task_id, kind, *pair.response_ids)
    try:
        stub.SubmitAnnotation(request, timeout=10, metadata=who)
        got = grpc.StatusCode.OK
    except grpc.RpcError as e:
        got = e.code()
    assert got == code
    with session_scope(engine) as session:
        kinds = [a.kind for a in session.scalars(select(Annotation))]
    assert kinds == (["ai"] if code == grpc.StatusCode.OK else [])


def test_a_person_cannot_close_a_judges_pair_even_holding_it(stub: Any, as_: Any, prompt: str, engine: Engine) -> None:
    ops, alice = as_("ops", OPERATOR), as_("alice")
    [pair, *_] = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=2), timeout=10, metadata=ops).tasks
    give(engine, "alice", pair.task_id)
    a, b = pair.response_ids
    request = pb.Annotation(
        annotation_id="h1", prompt_id=prompt, task_id=pair.task_id, kind=pb.ANNOTATOR_KIND_HUMAN,
        order=pb.OrderResult(groups=[pb.TieGroup(ids=[a]), pb.TieGroup(ids=[b])]),
    )  # fmt: skip
    code, details = refused(lambda: stub.SubmitAnnotation(request, timeout=10, metadata=alice))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "people annotate triples" in details
    assert stored(engine) == 0


def test_close_task_closes_a_pair_for_a_service_only_and_resolves_the_prompt(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    ops, judge = as_("ops", OPERATOR), as_("judge", SERVICE)
    pairs = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=2), timeout=10, metadata=ops).tasks

    def close(task_id: str, who: list[tuple[str, str]], reason: str = "the two orders disagree") -> Any:
        return stub.CloseTask(pb.CloseTaskRequest(task_id=task_id, reason=reason), timeout=10, metadata=who)

    for role in (ANNOTATOR, OPERATOR, ADMIN, SCORER_CLIENT):
        who = as_(f"x-{role}", role)
        assert refused(lambda: close(pairs[0].task_id, who))[0] == grpc.StatusCode.PERMISSION_DENIED  # noqa: B023
    assert refused(lambda: close(pairs[0].task_id, judge, " "))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert refused(lambda: close("f" * 64, judge))[0] == grpc.StatusCode.NOT_FOUND
    assert {t.status for t in tasks(engine, prompt, "pair")} == {"open"}
    assert close(pairs[0].task_id, judge).closed and not close(pairs[0].task_id, judge).closed
    for n, pair in enumerate(pairs[1:]):
        stub.SubmitAnnotation(verdict(prompt, f"v{n}", pair.task_id, a=pair.response_ids[0], b=pair.response_ids[1]),
                              timeout=10, metadata=judge)  # fmt: skip
    ranking = stub.GetRanking(pb.GetRankingRequest(prompt_id=prompt), timeout=10, metadata=ops)  # the last closed
    assert set(ranking.rank) <= {"r1", "r2", "r3"} and len(ranking.rank) >= 2


def test_a_person_is_given_triples_never_the_judges_pairs(stub: Any, as_: Any, prompt: str, engine: Engine) -> None:
    ops, alice = as_("ops", OPERATOR), as_("alice")
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=2), timeout=10, metadata=ops)
    code, details = refused(lambda: stub.ListTasks(pb.ListTasksRequest(group_size=2), timeout=10, metadata=alice))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and details.startswith("group_size:"), details
    assert stub.ListTasks(pb.ListTasksRequest(), timeout=10, metadata=alice).tasks == []  # pairs are not theirs
    assert all(t.status == "open" and t.held_by is None for t in tasks(engine, prompt, "pair"))
