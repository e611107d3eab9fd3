"""gRPC AnnotationService over a real server, on SQLite and PostgreSQL: tasks, annotations, resolve, errors; each
annotation sent by the account it is stored under (an admin's channel for the rest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.roles import ADMIN, SERVICE
from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc
from services.annotation.exports import ExportConfig
from services.annotation.server import host
from services.channels import open_channel
from services.hosting import HostConfig
from services.store import repository
from services.store.accounts import AccountBook
from services.store.db import session_scope
from services.store.models import Annotation, Ranking

RESPONSES = [(f"r{i}", f"第{i}个回答") for i in range(1, 6)]


@pytest.fixture
def stub(engine: Engine, account: Callable[[str, str], str], tmp_path: Path) -> Iterator[Any]:
    """The service's stub on an admin's channel; Export writes in tmp_path/exports."""
    exports = ExportConfig(str(tmp_path / "exports"))
    grpc_host = host(engine, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine), exports=exports).start()
    channel = open_channel(f"127.0.0.1:{grpc_host.port}", token=account("组长", ADMIN))
    yield annotation_pb2_grpc.AnnotationServiceStub(channel)
    channel.close()
    grpc_host.stop(0)


@pytest.fixture
def prompt(engine: Engine) -> str:
    with session_scope(engine) as session:
        pid, _ = repository.add_sample(session, "比较这五个回答", RESPONSES, ["推理"])
    return pid


def order(*groups: list[str]) -> pb.OrderResult:
    return pb.OrderResult(groups=[pb.TieGroup(ids=g) for g in groups])


def count(engine: Engine, model: Any) -> int:
    with session_scope(engine) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def assigned(stub: Any, who: list[tuple[str, str]], group_size: int = 3) -> list[pb.AnnotationTask]:
    """The tasks an annotator's own ListTasks assigns them (one per prompt)."""
    return [t.task for t in stub.ListTasks(pb.ListTasksRequest(group_size=group_size), timeout=10, metadata=who).tasks]


def pair_tasks(stub: Any, prompt: str) -> dict[frozenset[str], str]:
    """The prompt's AI pair tasks (made now, or again: the same ids), by their two response keys."""
    made = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=2), timeout=10).tasks
    return {frozenset(t.response_ids): t.task_id for t in made}


def status(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_triple_protocol_resolve_and_fetch(stub: Any, as_: Any, prompt: str, engine: Engine) -> None:
    tasks = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10).tasks
    assert [list(t.response_ids) for t in tasks] == [
        ["r1", "r2", "r3"],
        ["r2", "r3", "r4"],
        ["r3", "r4", "r5"],
        ["r4", "r5", "r1"],
        ["r5", "r1", "r2"],
    ]
    truth = {"r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 5}
    for n in range(len(tasks)):  # a prompt's triples go to different people: five annotators, one triple each
        who = as_(f"张三{n}")
        [task] = assigned(stub, who)
        ranked = sorted(task.response_ids, key=truth.__getitem__)
        request = pb.Annotation(
            annotation_id=f"a{n}",
            prompt_id=prompt,
            task_id=task.task_id,
            kind=pb.ANNOTATOR_KIND_HUMAN,
            order=order(*[[k] for k in ranked]),
        )
        assert stub.SubmitAnnotation(request, timeout=10, metadata=who).created
    resolved = stub.Resolve(pb.ResolveRequest(prompt_id=prompt), timeout=10)
    assert dict(resolved.ranking.rank) == truth and resolved.conflicts == 0
    assert dict(stub.GetRanking(pb.GetRankingRequest(prompt_id=prompt), timeout=10).rank) == truth


def test_list_tasks_for_an_annotator_leaves_out_the_prompts_they_annotated(stub: Any, as_: Any, prompt: str) -> None:
    def listed(annotator: str = "") -> list[str]:
        request = pb.ListTasksRequest(group_size=3, annotator=annotator)
        return [t.task.task_id for t in stub.ListTasks(request, timeout=10).tasks]

    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    first, *others = listed("甲")  # an admin's view of what 甲 may take: assigns nothing
    assert len(others) == 4
    assert [t.task_id for t in assigned(stub, as_("甲"))] == [first]  # 甲's own listing: one triple, now theirs
    request = pb.Annotation(
        annotation_id="a1",
        prompt_id=prompt,
        task_id=first,
        annotator="甲",
        kind=pb.ANNOTATOR_KIND_HUMAN,
        order=order(["r1", "r2"], ["r3"]),
    )
    assert stub.SubmitAnnotation(request, timeout=10, metadata=as_("甲")).created
    assert listed("甲") == []  # only triples of a prompt 甲 annotated are open: none for 甲
    assert listed("乙") == listed() == others
    own = stub.ListTasks(pb.ListTasksRequest(group_size=3), timeout=10, metadata=as_("甲"))  # 甲's own: none
    assert list(own.tasks) == []
    code, details = status(lambda: stub.ListTasks(pb.ListTasksRequest(annotator="x" * 200), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "annotator" in details


def test_ai_pairs_with_a_conflict_are_merged(stub: Any, as_: Any, prompt: str) -> None:
    verdicts = [
        ("r1", "r2", pb.VERDICT_A_BETTER),
        ("r2", "r3", pb.VERDICT_A_BETTER),
        ("r1", "r3", pb.VERDICT_B_BETTER),
        ("r4", "r5", pb.VERDICT_TIE),
    ]
    pairs = pair_tasks(stub, prompt)
    for n, (a, b, verdict) in enumerate(verdicts):
        request = pb.Annotation(
            annotation_id=f"ai{n}",
            prompt_id=prompt,
            task_id=pairs[frozenset((a, b))],
            kind=pb.ANNOTATOR_KIND_AI,
            pair=pb.PairResult(a=a, b=b, verdict=verdict),
        )
        stub.SubmitAnnotation(request, timeout=10, metadata=as_("judge-worker", SERVICE))
    resolved = stub.Resolve(pb.ResolveRequest(prompt_id=prompt), timeout=10)
    rank = dict(resolved.ranking.rank)
    assert rank["r1"] == rank["r2"] == rank["r3"] and rank["r4"] == rank["r5"]
    assert resolved.conflicts == 3 and resolved.merged_nodes == 2


def test_resubmitting_is_idempotent(stub: Any, as_: Any, prompt: str, engine: Engine) -> None:
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    who = as_("李四")
    [task] = assigned(stub, who)
    request = pb.Annotation(
        annotation_id="same",
        prompt_id=prompt,
        task_id=task.task_id,
        annotator="李四",
        kind=pb.ANNOTATOR_KIND_HUMAN,
        order=order(*[[k] for k in task.response_ids]),
    )
    assert stub.SubmitAnnotation(request, timeout=10, metadata=who).created
    assert not stub.SubmitAnnotation(request, timeout=10, metadata=who).created
    assert count(engine, Annotation) == 1


def test_bad_input_gets_a_status_and_stores_nothing(stub: Any, as_: Any, prompt: str, engine: Engine) -> None:
    who = as_("王五")

    def submit(**fields: Any) -> tuple[grpc.StatusCode, str]:
        base: dict[str, Any] = {
            "annotation_id": "x",
            "prompt_id": prompt,
            "annotator": "王五",
            "kind": pb.ANNOTATOR_KIND_HUMAN,
        }
        return status(lambda: stub.SubmitAnnotation(pb.Annotation(**{**base, **fields}), timeout=10, metadata=who))

    assert submit(pair=pb.PairResult(a="r1", b="r9", verdict=pb.VERDICT_A_BETTER)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unknown response id 'r9'",
    )
    assert submit(order=order(["r1"], ["r2", "r1"]))[0] == grpc.StatusCode.INVALID_ARGUMENT  # malformed order
    assert submit(pair=pb.PairResult(a="r1", b="r2"))[0] == grpc.StatusCode.INVALID_ARGUMENT  # no verdict
    assert submit(kind=pb.ANNOTATOR_KIND_UNSPECIFIED, pair=pb.PairResult(a="r1", b="r2", verdict=1))[0] == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert submit(prompt_id="nope", pair=pb.PairResult(a="r1", b="r2", verdict=1))[0] == grpc.StatusCode.NOT_FOUND
    code, details = submit(pair=pb.PairResult(a="r1", b="r2", verdict=1))  # a human annotation names its task
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "task_id is required" in details
    code, details = submit(task_id="f" * 64, pair=pb.PairResult(a="r1", b="r2", verdict=1))
    assert code == grpc.StatusCode.NOT_FOUND and "ffff" in details
    assert count(engine, Annotation) == 0
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt), timeout=10)
    [task] = assigned(stub, who)
    done = order(*[[k] for k in task.response_ids])
    stub.SubmitAnnotation(
        pb.Annotation(
            annotation_id="t1",
            prompt_id=prompt,
            task_id=task.task_id,
            annotator="王五",
            kind=pb.ANNOTATOR_KIND_HUMAN,
            order=done,
        ),
        timeout=10,
        metadata=who,
    )
    code, details = submit(annotation_id="t2", task_id=task.task_id, order=done)
    assert code == grpc.StatusCode.ALREADY_EXISTS and task.task_id in details  # once per task
    code, _ = submit(annotation_id="t1", pair=pb.PairResult(a="r1", b="r2", verdict=pb.VERDICT_TIE))
    assert code == grpc.StatusCode.FAILED_PRECONDITION  # the idempotency key reused with other content
    assert count(engine, Annotation) == 1
    assert status(lambda: stub.GetRanking(pb.GetRankingRequest(prompt_id=prompt), timeout=10))[0] == (
        grpc.StatusCode.NOT_FOUND
    )
    assert count(engine, Ranking) == 0


def test_export_writes_files_the_evaluator_and_trainer_read(
    stub: Any, as_: Any, prompt: str, engine: Engine, tmp_path: Path
) -> None:
    from cheems.formats.cheemsbench import read_bench
    from services.store.models import Export
    from trainer.data import read_groups

    pairs = pair_tasks(stub, prompt)
    for n, (a, b) in enumerate([("r1", "r2"), ("r2", "r3"), ("r3", "r4")]):
        stub.SubmitAnnotation(
            pb.Annotation(
                annotation_id=f"e{n}",
                prompt_id=prompt,
                task_id=pairs[frozenset((a, b))],
                kind=pb.ANNOTATOR_KIND_AI,
                pair=pb.PairResult(a=a, b=b, verdict=pb.VERDICT_A_BETTER),
            ),
            timeout=10,
            metadata=as_("赵六", SERVICE),
        )
    stub.Resolve(pb.ResolveRequest(prompt_id=prompt), timeout=10)
    bench = stub.Export(pb.ExportRequest(kind="bench", name="b.jsonl"), timeout=10)
    [item] = read_bench(tmp_path / "exports" / "b.jsonl")
    assert bench.records == 1 and dict(item.rank) == {"r1": 1, "r2": 2, "r3": 3, "r4": 4} and bench.name == "b.jsonl"
    preference = stub.Export(pb.ExportRequest(kind="preference", name="p.jsonl"), timeout=10)
    [group] = read_groups(tmp_path / "exports" / "p.jsonl")
    assert preference.records == 1 and len(group.pairs) == 6 and len(preference.sha256) == 64
    again = stub.Export(pb.ExportRequest(kind="bench", name="b2.jsonl"), timeout=10)
    assert again.sha256 == bench.sha256  # deterministic
    assert count(engine, Export) == 3
    assert status(lambda: stub.Export(pb.ExportRequest(kind="csv", name="x"), timeout=10))[0] == (
        grpc.StatusCode.INVALID_ARGUMENT
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"path": "/tmp/cheems-export.jsonl"},  # a server path, even with a name
        {"name": "../outside.jsonl"},
        {"name": "sub/b.jsonl"},
        {"name": "/tmp/cheems-export.jsonl"},
        {"name": ".."},
        {"name": ".bashrc"},
        {"name": "b\\x.jsonl"},
        {"name": "b\x00.jsonl"},
        {"name": ""},
        {"name": "b" * 200},
    ],
)
def test_export_writes_a_name_in_its_folder_and_refuses_any_path(
    stub: Any, engine: Engine, tmp_path: Path, fields: dict[str, str]
) -> None:
    """An operator's Export reached any file the service could write (the issue's row 5): now only names."""
    from services.store.models import Export

    victim = tmp_path / "victim.jsonl"
    victim.write_text("keep\n")
    request = pb.ExportRequest(kind="bench", **({"name": "b.jsonl"} | fields))
    if "path" in fields:
        request.path = str(victim)
    code, message = status(lambda: stub.Export(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.startswith("path:" if "path" in fields else "name:")
    assert victim.read_text() == "keep\n" and count(engine, Export) == 0
    assert not (tmp_path / "outside.jsonl").exists() and not list(tmp_path.glob("exports/*"))


def test_an_annotation_is_the_senders_and_a_service_submits_ai_ones_only(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    alice, judge = as_("alice"), as_("judge-worker", SERVICE)
    [task] = assigned(stub, alice)
    a, b = task.response_ids[:2]

    def submit(who: list[tuple[str, str]], n: int, **fields: Any) -> tuple[grpc.StatusCode, str] | bool:
        base: dict[str, Any] = {"annotation_id": f"f{n}", "prompt_id": prompt, "kind": pb.ANNOTATOR_KIND_HUMAN}
        x, y = fields.pop("keys", (a, b))
        request = pb.Annotation(**{**base, **fields}, pair=pb.PairResult(a=x, b=y, verdict=pb.VERDICT_A_BETTER))
        try:
            return bool(stub.SubmitAnnotation(request, timeout=10, metadata=who).created)
        except grpc.RpcError as e:
            return e.code(), e.details()

    code, details = submit(as_("mallory"), 1, annotator="alice")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "in the name of 'alice'" in details
    code, details = submit(judge, 2, annotator="alice")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "service account" in details
    code, details = submit(alice, 3, kind=pb.ANNOTATOR_KIND_AI, annotator="gpt")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "AI annotations come from service accounts" in details
    code, details = submit(judge, 6, kind=pb.ANNOTATOR_KIND_AI, annotator="alice")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "in the name of 'alice'" in details  # its own name only
    assert count(engine, Annotation) == 0
    assert submit(alice, 4, task_id=task.task_id) is True  # no annotator named: the sender
    pairs = pair_tasks(stub, prompt)
    ai = {"kind": pb.ANNOTATOR_KIND_AI, "task_id": pairs[frozenset((a, b))]}
    assert submit(judge, 5, **ai) is True
    keys, ai["task_id"] = next((keys, t) for keys, t in pairs.items() if keys != {a, b})
    assert submit(judge, 7, **ai, annotator="judge-worker", keys=sorted(keys)) is True
    with session_scope(engine) as session:
        stored = {a.id: (a.annotator, a.kind) for a in session.query(Annotation)}
    assert stored == {"f4": ("alice", "human"), "f5": ("judge-worker", "ai"), "f7": ("judge-worker", "ai")}
    code, details = status(lambda: stub.ListTasks(pb.ListTasksRequest(annotator="bob"), timeout=10, metadata=alice))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "only their own tasks" in details


def human(prompt: str, task: pb.AnnotationTask, n: str, ranked: list[str], discarded: list[str] = ()) -> pb.Annotation:  # type: ignore[assignment]
    return pb.Annotation(
        annotation_id=n,
        prompt_id=prompt,
        task_id=task.task_id,
        kind=pb.ANNOTATOR_KIND_HUMAN,
        order=order(*[[k] for k in ranked]),
        discarded=list(discarded),
    )


def test_listing_holds_max_held_tasks_and_the_page_shows_the_oldest_of_them(
    stub: Any, as_: Any, engine: Engine
) -> None:
    from services.annotation.service import AnnotationService
    from services.annotation.web.workbench import Person, Workbench

    with session_scope(engine) as session:  # twenty prompts of one triple each
        prompts = [repository.add_sample(session, f"第{n}题", RESPONSES[:3], ["推理"])[0] for n in range(20)]
    for prompt_id in prompts:
        stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt_id, group_size=3), timeout=10)
    jia, page = as_("甲"), Workbench(AnnotationService(engine))
    shown = page.next_task(Person("甲", False))  # the page takes one
    listed = [t.task_id for t in assigned(stub, jia)]  # ListTasks' default limit: tops 甲's up to five, no more
    assert shown is not None and len(listed) == 5 and listed[0] == shown.task_id
    assert [t.task_id for t in assigned(stub, jia)] == listed
    assert [len(assigned(stub, as_(name))) for name in ("乙", "丙", "丁")] == [5, 5, 5]  # the rest for the others
    assert page.next_task(Person("甲", False)).task_id == shown.task_id  # type: ignore[union-attr]  # until done


def test_a_task_the_page_gave_someone_else_is_refused_over_grpc(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    from services.annotation.service import AnnotationService
    from services.annotation.web.workbench import Person, Workbench

    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    as_("甲")
    given = Workbench(AnnotationService(engine)).next_task(Person("甲", False))  # the page gives 甲 a triple
    assert given is not None
    mallory = as_("mallory")
    task = pb.AnnotationTask(task_id=given.task_id, prompt_id=prompt, response_ids=list(given.contents))
    code, details = status(lambda: stub.SubmitAnnotation(human(prompt, task, "m1", list(given.contents)), timeout=10,
                                                         metadata=mallory))  # fmt: skip
    assert (
        code == grpc.StatusCode.PERMISSION_DENIED and given.task_id in details and "not assigned to mallory" in details
    )
    assert given.task_id not in {t.task_id for t in assigned(stub, mallory)}  # and never listed to them
    assert count(engine, Annotation) == 0


def test_an_annotator_annotates_a_task_once_and_cannot_flip_a_ranking_alone(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    truth = {"r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 5}
    people = [as_(f"p{n}") for n in range(5)]
    tasks = [assigned(stub, who)[0] for who in people]
    for n, (who, task) in enumerate(zip(people[1:], tasks[1:], strict=True)):
        ranked = sorted(task.response_ids, key=truth.__getitem__)
        assert stub.SubmitAnnotation(human(prompt, task, f"h{n}", ranked), timeout=10, metadata=who).created
    bad, task = people[0], tasks[0]
    reversed_ = sorted(task.response_ids, key=truth.__getitem__, reverse=True)
    assert stub.SubmitAnnotation(human(prompt, task, "bad-0", reversed_), timeout=10, metadata=bad).created
    for n in range(1, 5):  # the same reversed order again, under new ids: refused
        code, details = status(lambda n=n: stub.SubmitAnnotation(human(prompt, task, f"bad-{n}", reversed_),
                                                                 timeout=10, metadata=bad))  # fmt: skip
        assert code == grpc.StatusCode.ALREADY_EXISTS and task.task_id in details
    assert not stub.SubmitAnnotation(human(prompt, task, "bad-0", reversed_), timeout=10, metadata=bad).created
    rank = dict(stub.GetRanking(pb.GetRankingRequest(prompt_id=prompt), timeout=10).rank)
    assert len(set(rank.values())) >= 3  # one reversed triple among five: a ranking, not all ties
    assert count(engine, Annotation) == 5


def test_one_annotators_discards_leave_the_others_relations(stub: Any, as_: Any, prompt: str) -> None:
    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    truth = {"r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 5}
    people = [as_(f"q{n}") for n in range(5)]
    for n, who in enumerate(people):
        [task] = assigned(stub, who)
        ranked = sorted(task.response_ids, key=truth.__getitem__)
        gone = list(task.response_ids) if n == 0 else []  # q0 discards every response of their triple
        stub.SubmitAnnotation(human(prompt, task, f"d{n}", ranked, gone), timeout=10, metadata=who)
    rank = dict(stub.GetRanking(pb.GetRankingRequest(prompt_id=prompt), timeout=10).rank)
    assert rank == truth  # the other four triples still rank all five


def test_an_operator_reassigns_a_task_and_voids_an_annotation_on_record(
    stub: Any, as_: Any, prompt: str, engine: Engine
) -> None:
    from services.store.assignments import corrections

    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    ops, jia, yi = as_("ops", "operator"), as_("甲"), as_("乙")
    [task] = assigned(stub, jia)
    ranked = list(task.response_ids)
    reassign = pb.ReassignTaskRequest(task_id=task.task_id, annotator="乙", reason="甲 is on leave")
    code, _ = status(lambda: stub.ReassignTask(reassign, timeout=10, metadata=jia))
    assert code == grpc.StatusCode.PERMISSION_DENIED  # an annotator may not
    code, details = status(lambda: stub.ReassignTask(pb.ReassignTaskRequest(task_id=task.task_id, annotator="乙"),
                                                     timeout=10, metadata=ops))  # fmt: skip
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "reason" in details
    assert stub.ReassignTask(reassign, timeout=10, metadata=ops).previous == "甲"
    code, details = status(lambda: stub.SubmitAnnotation(human(prompt, task, "j1", ranked), timeout=10, metadata=jia))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "another annotator" in details  # stale: 乙's now
    assert stub.SubmitAnnotation(human(prompt, task, "y1", ranked), timeout=10, metadata=yi).created

    voided = stub.VoidAnnotation(pb.VoidAnnotationRequest(annotation_id="y1", reason="random"), timeout=10,
                                 metadata=ops)  # fmt: skip
    assert voided.prompt_id == prompt and voided.voided
    again = stub.VoidAnnotation(pb.VoidAnnotationRequest(annotation_id="y1", reason="random"), timeout=10,
                                metadata=ops)  # fmt: skip
    assert not again.voided
    code, _ = status(lambda: stub.VoidAnnotation(pb.VoidAnnotationRequest(annotation_id="nope", reason="x"),
                                                 timeout=10, metadata=ops))  # fmt: skip
    assert code == grpc.StatusCode.NOT_FOUND
    with session_scope(engine) as session:
        assert repository.annotations_for(session, prompt) == []  # it no longer counts
        assert repository.tasks_for(session, prompt, "open")[0].id == task.task_id  # open for someone else
        rows = [(c.action, c.annotator, c.previous, c.actor, c.reason) for c in corrections(session)]
    assert rows == [
        ("reassigned", "乙", "甲", "person:ops", "甲 is on leave"),
        ("voided", "乙", None, "person:ops", "random"),
    ]
    assert task.task_id not in {t.task_id for t in assigned(stub, yi)}  # 乙 annotated this prompt
