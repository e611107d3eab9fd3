"""The Guard on a real gRPC server: a call without a valid token is UNAUTHENTICATED and a role that may not call the
method PERMISSION_DENIED (with the `cheems-error-reason` trailer), both before the request's bytes are parsed or the
method runs, for unary and client-streaming methods alike; health and reflection stay open; a handler reads its
caller; no token reaches the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from cheems.roles import ADMIN, OPERATOR, SCORER_CLIENT, Caller
from services.access import Guard, bearer_token, caller, first_of, static_token
from services.grpc_errors import error_reason
from services.hosting import bind

TOKENS = {"op-token-0123456789": Caller("ops", OPERATOR), "rl-token-0123456789": Caller("rlhf", SCORER_CLIENT)}
UNARY, STREAM = "/cheems.v1.IngestionService/GetSample", "/cheems.v1.IngestionService/Ingest"


class Recorder:
    """The methods' behaviour: what they were given, and who called."""

    def __init__(self) -> None:
        self.parsed: list[bytes] = []
        self.callers: list[Caller] = []

    def parse(self, raw: bytes) -> bytes:
        self.parsed.append(raw)
        return raw

    def unary(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.callers.append(caller())
        return b"ok:" + request

    def stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        self.callers.append(caller())
        return b"%d" % len(list(requests))


@pytest.fixture
def served() -> Iterator[tuple[grpc.Channel, Recorder]]:
    record = Recorder()
    handlers = {
        "GetSample": grpc.unary_unary_rpc_method_handler(record.unary, record.parse, bytes),
        "Ingest": grpc.stream_unary_rpc_method_handler(record.stream, record.parse, bytes),
    }
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[Guard(TOKENS.get)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("cheems.v1.IngestionService", handlers),))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    reflection.enable_server_reflection([health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    port = bind(server, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel, record
    channel.close()
    server.stop(0)


def call(channel: grpc.Channel, method: str, token: str | None, payload: Any = b"x") -> tuple[grpc.StatusCode, str]:
    metadata = [("authorization", f"Bearer {token}")] if token is not None else None
    if method == STREAM:
        stub: Any = channel.stream_unary(method, request_serializer=bytes, response_deserializer=bytes)
    else:
        stub = channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
    try:
        stub(payload, metadata=metadata)  # no deadline, as grpcurl
    except grpc.RpcError as e:
        assert e.code() in (grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED) or error_reason(e), "no reason trailer"
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def test_refused_before_anything_is_read(served: tuple[grpc.Channel, Recorder], caplog: Any) -> None:
    channel, record = served
    caplog.set_level(logging.DEBUG)
    for method, payload in ((UNARY, b"\xff\xfe"), (STREAM, iter([b"a", b"b"]))):
        assert call(channel, method, None, payload)[0] == grpc.StatusCode.UNAUTHENTICATED
        code, details = call(channel, method, "wrong-token-0123456789", payload)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "bearer token" in details
        code, details = call(channel, method, "rl-token-0123456789", payload)
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert details == f"{method[1:]} needs the role operator or admin; rlhf is scorer-client"
    assert record.parsed == [] and record.callers == []  # nothing parsed, nothing ran
    assert call(channel, UNARY, "op-token-0123456789") == (grpc.StatusCode.OK, "")
    assert call(channel, STREAM, "op-token-0123456789", iter([b"a", b"b"])) == (grpc.StatusCode.OK, "")
    assert record.callers == [Caller("ops", OPERATOR)] * 2 and record.parsed == [b"x", b"a", b"b"]
    assert not any("token-0123456789" in r.getMessage() for r in caplog.records)  # refusals are logged, tokens not
    assert any("refused" in r.getMessage() for r in caplog.records)


def test_health_and_reflection_stay_open_and_unknown_methods_are_unimplemented(
    served: tuple[grpc.Channel, Recorder],
) -> None:
    channel, _ = served
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert health.SERVICE_NAME in set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert call(channel, "/cheems.v1.IngestionService/Nothing", None)[0] == grpc.StatusCode.UNIMPLEMENTED


def test_tokens_are_read_from_the_bearer_header_and_compared_whole() -> None:
    assert bearer_token([("x", "y"), ("authorization", "Bearer abc ")]) == "abc"
    assert bearer_token([("authorization", "bearer abc")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) == "" and bearer_token(None) == ""
    one = static_token("s3cret", Caller("token", SCORER_CLIENT))
    assert one("s3cret") == Caller("token", SCORER_CLIENT) and one("s3cre") is None and one("s3cretx") is None
    assert static_token("", Caller("x", ADMIN))("") is None
    both = first_of(None, one, TOKENS.get)
    assert both is not None and both("op-token-0123456789") == Caller("ops", OPERATOR) and both("s3cret")
    assert first_of(None, None) is None
    with pytest.raises(RuntimeError, match=r"without a services\.access\.Guard"):
        caller()
