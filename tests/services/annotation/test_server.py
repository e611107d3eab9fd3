"""gRPC AnnotationService over a real server, on SQLite and PostgreSQL: tasks, annotations, resolve, errors; each
annotation sent by the account it is stored under (an admin's channel for the rest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.roles import ADMIN, ANNOTATOR, SERVICE
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
from tests.services.accounts import bearer

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
def as_(account: Callable[[str, str], str]) -> Callable[..., list[tuple[str, str]]]:
    """as_(name, role=ANNOTATOR) -> the metadata of a call from that account."""
    return lambda name, role=ANNOTATOR: bearer(account(name, role))


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
    for n, task in enumerate(tasks):
        ranked = sorted(task.response_ids, key=truth.__getitem__)
        request = pb.Annotation(
            annotation_id=f"a{n}",
            prompt_id=prompt,
            task_id=task.task_id,
            annotator="张三",
            kind=pb.ANNOTATOR_KIND_HUMAN,
            order=order(*[[k] for k in ranked]),
        )
        assert stub.SubmitAnnotation(request, timeout=10, metadata=as_("张三")).created
    resolved = stub.Resolve(pb.ResolveRequest(prompt_id=prompt), timeout=10)
    assert dict(resolved.ranking.rank) == truth and resolved.conflicts == 0
    assert dict(stub.GetRanking(pb.GetRankingRequest(prompt_id=prompt), timeout=10).rank) == truth


def test_list_tasks_for_an_annotator_leaves_out_the_prompts_they_annotated(stub: Any, as_: Any, prompt: str) -> None:
    def listed(annotator: str = "") -> list[str]:
        request = pb.ListTasksRequest(group_size=3, annotator=annotator)
        return [t.task.task_id for t in stub.ListTasks(request, timeout=10).tasks]

    stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt, group_size=3), timeout=10)
    first, *others = listed("甲")
    assert len(others) == 4
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
    for n, (a, b, verdict) in enumerate(verdicts):
        request = pb.Annotation(
            annotation_id=f"ai{n}",
            prompt_id=prompt,
            annotator="judge",
            kind=pb.ANNOTATOR_KIND_AI,
            pair=pb.PairResult(a=a, b=b, verdict=verdict),
        )
        stub.SubmitAnnotation(request, timeout=10, metadata=as_("judge-worker", SERVICE))
    resolved = stub.Resolve(pb.ResolveRequest(prompt_id=prompt), timeout=10)
    rank = dict(resolved.ranking.rank)
    assert rank["r1"] == rank["r2"] == rank["r3"] and rank["r4"] == rank["r5"]
    assert resolved.conflicts == 3 and resolved.merged_nodes == 2


def test_resubmitting_is_idempotent(stub: Any, as_: Any, prompt: str, engine: Engine) -> None:
    request = pb.Annotation(
        annotation_id="same",
        prompt_id=prompt,
        annotator="李四",
        kind=pb.ANNOTATOR_KIND_HUMAN,
        pair=pb.PairResult(a="r1", b="r2", verdict=pb.VERDICT_A_BETTER),
    )
    who = as_("李四")
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
    assert count(engine, Annotation) == 0
    [task, *_] = stub.CreateTasks(pb.CreateTasksRequest(prompt_id=prompt), timeout=10).tasks
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
    code, _ = submit(annotation_id="t2", task_id=task.task_id, order=done)
    assert code == grpc.StatusCode.FAILED_PRECONDITION  # the task is completed
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

    for n, (a, b) in enumerate([("r1", "r2"), ("r2", "r3"), ("r3", "r4")]):
        stub.SubmitAnnotation(
            pb.Annotation(
                annotation_id=f"e{n}",
                prompt_id=prompt,
                annotator="赵六",
                kind=pb.ANNOTATOR_KIND_HUMAN,
                pair=pb.PairResult(a=a, b=b, verdict=pb.VERDICT_A_BETTER),
            ),
            timeout=10,
            metadata=as_("赵六"),
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
    def submit(who: list[tuple[str, str]], n: int, **fields: Any) -> tuple[grpc.StatusCode, str] | bool:
        base: dict[str, Any] = {"annotation_id": f"f{n}", "prompt_id": prompt, "kind": pb.ANNOTATOR_KIND_HUMAN}
        request = pb.Annotation(**{**base, **fields}, pair=pb.PairResult(a="r1", b="r2", verdict=pb.VERDICT_A_BETTER))
        try:
            return bool(stub.SubmitAnnotation(request, timeout=10, metadata=who).created)
        except grpc.RpcError as e:
            return e.code(), e.details()

    alice, judge = as_("alice"), as_("judge-worker", SERVICE)
    code, details = submit(as_("mallory"), 1, annotator="alice")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "in the name of 'alice'" in details
    code, details = submit(judge, 2, annotator="alice")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "service account" in details
    code, details = submit(alice, 3, kind=pb.ANNOTATOR_KIND_AI, annotator="gpt")  # type: ignore[misc]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "AI annotations come from service accounts" in details
    assert count(engine, Annotation) == 0
    assert submit(alice, 4) is True  # no annotator named: the sender
    assert submit(judge, 5, kind=pb.ANNOTATOR_KIND_AI, annotator="qwen-judge") is True
    with session_scope(engine) as session:
        stored = {a.id: (a.annotator, a.kind) for a in session.query(Annotation)}
    assert stored == {"f4": ("alice", "human"), "f5": ("qwen-judge", "ai")}
    code, details = status(lambda: stub.ListTasks(pb.ListTasksRequest(annotator="bob"), timeout=10, metadata=alice))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "only their own tasks" in details
