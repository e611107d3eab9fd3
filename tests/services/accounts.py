"""Accounts for tests that call the services: a token per (name, role), made in the test's store.

token = account(engine, "张三", ANNOTATOR)                 # or the `account` fixture: account("张三", ANNOTATOR)
stub.SubmitAnnotation(request, metadata=bearer(token))
give(engine, "张三", task_id)                               # the task assigned to 张三 (an account made if need be)
channel = open_channel(target, token=token)               # every call of the channel carries it
server = grpc.server(pool, handlers=[recorder := Recorder()])  # a stranger's port: what credentials reach it
"""

from __future__ import annotations

import grpc
from sqlalchemy import Engine

from services.store.accounts import add_account, reset_token
from services.store.db import session_scope
from services.store.models import Annotator, TaskClaim, utcnow


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
    """Answers nothing (UNIMPLEMENTED) and keeps the metadata of each call: what a stranger's port would see."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> None:
        self.seen.append(dict(handler_call_details.invocation_metadata))  # type: ignore[attr-defined]
        return None

    def authorizations(self) -> list[str]:
        return [m["authorization"] for m in self.seen if "authorization" in m]


def give(engine: Engine, name: str, *task_ids: str) -> None:
    """Assign the tasks to the annotator `name` (a claim, as their listing or the page makes), making the account
    if it is missing: their human annotations of them pass the claim rule (`services.store.assignments`)."""
    with session_scope(engine) as session:
        if session.get(Annotator, name) is None:
            add_account(session, name, "annotator")
        for task_id in task_ids:
            session.add(TaskClaim(task_id=task_id, annotator=name, claimed_at=utcnow()))
