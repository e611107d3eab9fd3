"""The gRPC edge of the error tree: each kind -> one status, and the reason word in trailing metadata; on the client,
a refused call (from a real server) -> the kind its status stands for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cheems import errors
from services.grpc_errors import REASON_KEY, STATUS, abort, error_of, status_of
from services.scorer.errors import BackendUnavailable, LimitExceeded
from services.store.errors import NotAssigned, TaskAnnotated, TaskClosed, UnknownPrompt, UnknownRun, UnknownTask
from tests.services.accounts import Recorder, listening

CASES = [
    (errors.FormatError("a.jsonl", 3, "bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ModelError("no weights"), grpc.StatusCode.INVALID_ARGUMENT),
    (UnknownTask("t"), grpc.StatusCode.NOT_FOUND),
    (UnknownPrompt("p"), grpc.StatusCode.NOT_FOUND),
    (UnknownRun("r"), grpc.StatusCode.NOT_FOUND),
    (TaskClosed("t"), grpc.StatusCode.FAILED_PRECONDITION),
    (TaskAnnotated("t"), grpc.StatusCode.ALREADY_EXISTS),
    (NotAssigned("t"), grpc.StatusCode.PERMISSION_DENIED),
    (LimitExceeded("too big"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (BackendUnavailable("restarting"), grpc.StatusCode.UNAVAILABLE),
    (errors.PortInUse("taken"), grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceeded("late"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.Cancelled("gone"), grpc.StatusCode.CANCELLED),
    (errors.CheemsError("bug"), grpc.StatusCode.INTERNAL),
]


@pytest.mark.parametrize(("error", "code"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_each_kind_has_its_status(error: errors.CheemsError, code: grpc.StatusCode) -> None:
    assert status_of(error) == code


class Context:
    """Records what a servicer context is told (grpc's abort raises; so does this)."""

    def __init__(self) -> None:
        self.trailing: Any = None
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing = metadata

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError("aborted")


def test_abort_sends_status_message_and_reason() -> None:
    context = Context()
    with pytest.raises(RuntimeError, match="aborted"):
        abort(context, LimitExceeded("65 responses, at most 64"))  # type: ignore[arg-type]
    assert context.aborted == (grpc.StatusCode.RESOURCE_EXHAUSTED, "65 responses, at most 64")
    assert context.trailing == ((REASON_KEY, "limit_exceeded"),)


def test_store_errors_are_in_the_tree() -> None:
    assert isinstance(UnknownRun("r"), errors.CheemsError)
    assert isinstance(UnknownRun("r"), LookupError)


def refused(code: grpc.StatusCode) -> grpc.RpcError:
    """The error a call gets from a real server that refuses it with `code`."""
    with listening(Recorder(refuse=code)) as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary("/t.T/Call")(b"", timeout=10)
        except grpc.RpcError as e:
            return e
    raise AssertionError("the call was not refused")


@pytest.fixture(scope="module")
def refusals() -> Iterator[dict[grpc.StatusCode, grpc.RpcError]]:
    yield {code: refused(code) for code in {*(c for _, c in STATUS), grpc.StatusCode.UNKNOWN}}


def test_a_refused_call_is_the_kind_its_status_stands_for(refusals: dict[grpc.StatusCode, grpc.RpcError]) -> None:
    for kind, code in STATUS:  # one map both ways (each status has one kind)
        error = error_of(refusals[code], "scorer")
        assert type(error) is kind and status_of(error) == code
        assert str(error) == f"scorer: {code.name}: refused"
    assert type(error_of(refusals[grpc.StatusCode.UNKNOWN], "scorer")) is errors.CheemsError
