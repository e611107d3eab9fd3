"""Accounts for tests that call the services: a token per (name, role), made in the test's store.

token = account(engine, "张三", ANNOTATOR)                 # or the `account` fixture: account("张三", ANNOTATOR)
stub.SubmitAnnotation(request, metadata=bearer(token))
give(engine, "张三", task_id)                               # the task assigned to 张三 (an account made if need be)
channel = open_channel(target, token=token)               # every call of the channel carries it
server = grpc.server(pool, handlers=[recorder := Recorder()])  # a stranger's port: what credentials reach it
Recorder(refuse=grpc.StatusCode.NOT_FOUND)                # every call refused with that status
with listening(recorder) as port: ...                     # a real server on 127.0.0.1:port answering with it
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc
from sqlalchemy import Engine

from services.store.accounts import add_account, reset_token
from services.store.annotators import claim
from services.store.db import session_scope
from services.store.models import AnnotationTask, Annotator, utcnow


def account(engine: Engine, name: str, role: str) -> str:
    """A new token of the account `name` with `role` (made, or its token reset when it exists)."""
    with session_scope(engine) as session:
        if session.get(Annotator, name) is None:
            return add_account(session, name, role)
        return reset_token(session, name)


def bearer(token: str) -> list[tuple[str, str]]:
    """gRPC call metadata carrying `token`."""
    return [("authorization", f"Bearer {token}")]


class Recorder(grpc.GenericRpcHandler):
    """Answers nothing (UNIMPLEMENTED), or refuses every call with `refuse` when given, and keeps the metadata of
    each call: what a stranger's port would see."""

    def __init__(self, refuse: grpc.StatusCode | None = None) -> None:
        self.seen: list[dict[str, str]] = []
        self.refuse = refuse

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        self.seen.append(dict(handler_call_details.invocation_metadata))  # type: ignore[attr-defined]
        if self.refuse is None:
            return None
        code = self.refuse
        return grpc.unary_unary_rpc_method_handler(lambda request, context: context.abort(code, "refused"))

    def authorizations(self) -> list[str]:
        return [m["authorization"] for m in self.seen if "authorization" in m]


@contextmanager
def listening(recorder: Recorder, credentials: grpc.ServerCredentials | None = None) -> Iterator[int]:
    """A real gRPC server on 127.0.0.1 (TLS with `credentials`) answering every call with `recorder`: its port."""
    server = grpc.server(ThreadPoolExecutor(2), handlers=[recorder])
    address = "127.0.0.1:0"
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    server.start()
    try:
        yield port
    finally:
        server.stop(None)


def give(engine: Engine, name: str, *task_ids: str) -> None:
    """Assign the tasks to the annotator `name` (a claim, as their listing, the page or a reassign makes: theirs
    now, whoever held them), making the account if it is missing: their human annotations of them pass the claim
    rule (`services.store.assignments`)."""
    with session_scope(engine) as session:
        if session.get(Annotator, name) is None:
            add_account(session, name, "annotator")
        for task_id in task_ids:
            task = session.get(AnnotationTask, task_id)
            assert task is not None, task_id
            claim(session, task, name, utcnow())
