"""AnnotationService as a stranger's client calls it: message classes from server reflection, requests written as
grpcurl's JSON, no deadline, an operator's bearer token as grpcurl's -H sends it; and bytes no generated stub would
send (invalid UTF-8, a lone surrogate, NUL), each refused with INVALID_ARGUMENT while the server serves on. SQLite
and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from sqlalchemy import Engine

from cheems import roles
from cheems.roles import OPERATOR
from services.annotation.server import host
from services.annotation.service import AnnotationService
from services.hosting import HostConfig
from services.store.accounts import AccountBook
from tests.services.accounts import account, bearer, give

SERVICE = "cheems.v1.AnnotationService"
RESPONSES = [(f"r{i}", f"第{i}个回答") for i in range(1, 6)]


class Served(NamedTuple):
    channel: grpc.Channel
    service: AnnotationService
    headers: list[tuple[str, str]]  # grpcurl -H 'authorization: Bearer TOKEN' (an operator's)


@pytest.fixture
def served(engine: Engine) -> Iterator[Served]:
    grpc_host = host(engine, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_host.port}")
    yield Served(channel, AnnotationService(engine), bearer(account(engine, "ops", OPERATOR)))
    channel.close()
    grpc_host.stop(0)


def list_tasks(served: Served, body: str) -> dict[str, Any]:
    """ListTasks with the request as grpcurl -d takes it, classes from reflection, no deadline; the reply as JSON."""
    channel = served.channel
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    method = pool.FindServiceByName(SERVICE).methods_by_name["ListTasks"]
    request = json_format.Parse(body, message_factory.GetMessageClass(method.input_type)())
    reply_class = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(
        f"/{SERVICE}/ListTasks",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=reply_class.FromString,
    )
    return json_format.MessageToDict(call(request, metadata=served.headers))  # no timeout=


def test_list_tasks_for_an_annotator_from_json_without_a_deadline(served: Served) -> None:
    service = served.service
    prompt, tasks = service.take_sample("", "比较这五个回答", RESPONSES, ["推理"], None, "test", [], 3)
    give(served.service.engine, "甲", tasks[0][0])
    service.submit("a1", prompt, "甲", "human", {"order": [[k] for k in tasks[0][1]]}, [], tasks[0][0])
    assert len(list_tasks(served, '{"groupSize": 3}')["tasks"]) == 4
    assert list_tasks(served, '{"groupSize": 3, "annotator": "甲"}') == {}  # 甲 did a triple of the only prompt
    assert len(list_tasks(served, '{"group_size": 3, "annotator": "乙"}')["tasks"]) == 4


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'"\x02\xff\xfe', "not a valid cheems.v1.ListTasksRequest"),  # annotator (field 4): invalid UTF-8
        (b'"\x05\xed\xa0\x80ab', "not a valid cheems.v1.ListTasksRequest"),  # a lone surrogate, as CESU-8 writes it
        (b'"\x03a\x00b', "annotator: contains a NUL character"),  # valid UTF-8; PostgreSQL cannot compare it
    ],
)
def test_bytes_a_stub_would_not_send_are_invalid_argument(served: Served, raw: bytes, says: str) -> None:
    call = served.channel.unary_unary(
        f"/{SERVICE}/ListTasks", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(grpc.RpcError) as info:
        call(raw, metadata=served.headers)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in (info.value.details() or "")
    assert list_tasks(served, "{}") == {}  # and it serves on


def call_json(served: Served, method: str, body: str, headers: list[tuple[str, str]]) -> dict[str, Any]:
    """Any method, as grpcurl calls it: classes from reflection, the request as JSON, no deadline."""
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(served.channel))
    found = pool.FindServiceByName(SERVICE).methods_by_name[method]
    request = json_format.Parse(body, message_factory.GetMessageClass(found.input_type)())
    call = served.channel.unary_unary(
        f"/{SERVICE}/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=message_factory.GetMessageClass(found.output_type).FromString,
    )
    return json_format.MessageToDict(call(request, metadata=headers), always_print_fields_with_no_presence=True)


def test_a_judge_closes_its_pair_and_never_a_triple_from_json(served: Served, engine: Engine) -> None:
    service, judge = served.service, bearer(account(engine, "judge", roles.SERVICE))
    prompt, _ = service.take_sample("", "比较这五个回答", RESPONSES, ["推理"], None, "test", [], 3)
    [(pair, _), *_] = service.create_tasks(prompt, 2)
    listed = call_json(served, "ListTasks", '{"groupSize": 2, "limit": 1}', judge)["tasks"]
    assert [t["task"]["taskId"] for t in listed] == [pair]
    body = f'{{"taskId": "{pair}", "reason": "判断不了"}}'
    assert call_json(served, "CloseTask", body, judge) == {"closed": True}
    assert call_json(served, "CloseTask", body, judge) == {"closed": False}  # once
    triple = service.open_tasks(prompt, 3, 1)[0].task_id
    with pytest.raises(grpc.RpcError) as refused:
        call_json(served, "CloseTask", f'{{"taskId": "{triple}", "reason": "x"}}', judge)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as operator:
        call_json(served, "CloseTask", body, served.headers)  # an operator's token: not a service's
    assert operator.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    "raw",
    [
        b"\n\x03a\x00b\x12\x01x",  # task_id with a NUL
        b"\n\x01t\x12\x02\xff\xfe",  # reason: invalid UTF-8
        b"\n\x01t\x12\x00",  # no reason
        b"\n" + b"\x90\x4e" + b"t" * 10000 + b"\x12\x01x",  # a 10,000-character task id
    ],
    ids=["nul", "utf8", "empty-reason", "huge-id"],
)
def test_close_task_bytes_a_stub_would_not_send_are_invalid_argument(
    served: Served, engine: Engine, raw: bytes
) -> None:
    judge = bearer(account(engine, "judge", roles.SERVICE))
    call = served.channel.unary_unary(
        f"/{SERVICE}/CloseTask", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(grpc.RpcError) as info:
        call(raw, metadata=judge)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert call_json(served, "ListTasks", '{"groupSize": 2}', judge) == {"tasks": []}  # and it serves on


@pytest.mark.parametrize(
    ("method", "raw"),
    [
        ("ReassignTask", b"\n\x03a\x00b\x12\x01x\x1a\x01y"),  # task_id with a NUL (an operator's call)
        ("ReassignTask", b"\n\x90\x4e" + b"t" * 10000 + b"\x12\x01x\x1a\x01y"),  # a 10,000-character task id
        ("ListTasks", b"\n\x03a\x00b"),  # prompt_id with a NUL
        ("ListTasks", b"\n\x90\x4e" + b"p" * 10000),
        ("GetRanking", b"\n\x03a\x00b"),
        ("CreateTasks", b"\n\x03a\x00b\x10\x03"),
        ("Resolve", b"\n\x03a\x00b"),
    ],
    ids=["reassign-nul", "reassign-huge", "list-nul", "list-huge", "ranking-nul", "create-nul", "resolve-nul"],
)
def test_an_id_no_stub_would_send_is_invalid_argument(served: Served, method: str, raw: bytes) -> None:
    call = served.channel.unary_unary(
        f"/{SERVICE}/{method}", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(grpc.RpcError) as info:
        call(raw, metadata=served.headers)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert len(info.value.details() or "") < 400  # the id is not echoed whole
    assert list_tasks(served, "{}") == {}  # and it serves on
