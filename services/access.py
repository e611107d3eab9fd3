"""Every gRPC call names an account: the bearer token is checked, then the role, before the request is read.

    guard = Guard(AccountBook(engine))                 # tokens checked against the store's accounts
    guard = Guard(static_token(token, Caller("ablation", OPERATOR)))   # one token, one caller (no store)
    server = grpc.server(pool, interceptors=[guard])   # or GrpcHost(config, ..., guard=guard)
    ...
    who = caller()                                     # in a servicer: the Caller of the call being served

A call without `authorization: Bearer TOKEN`, or with a token no active account has, is UNAUTHENTICATED; an
account whose role may not call the method (`cheems.roles.PERMISSIONS`) is PERMISSION_DENIED, the message naming
the role it needs. Both happen in the interceptor, before the request's bytes are parsed or anything is stored,
and carry the `cheems-error-reason` trailer (`unauthenticated`, `permission_denied`). The standard health service
and server reflection stay open (probes, grpcurl's discovery). A token is never logged or put in a message.
"""

from __future__ import annotations

import contextvars
import hmac
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from cheems import errors
from cheems.roles import Caller, needed, spelled
from services.grpc_errors import abort

log = logging.getLogger(__name__)
Authenticate = Callable[[str], Caller | None]  # a bearer token -> its account, or None
OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("cheems_caller", default=None)


def caller() -> Caller:
    """The account of the call this handler serves (set by the Guard for the handler's duration)."""
    found = _CALLER.get()
    if found is None:
        raise RuntimeError("no caller: this handler is served without a services.access.Guard")
    return found


def bearer_of(header: str) -> str:
    """The token of an `authorization` header's value `Bearer TOKEN` ("" for another scheme or none): gRPC
    metadata and HTTP headers alike."""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def bearer_token(metadata: Sequence[tuple[str, Any]] | None) -> str:
    """The token of the call's first `authorization: Bearer TOKEN` entry ("" when there is none)."""
    for key, value in metadata or ():
        if key == "authorization":
            return bearer_of(str(value))
    return ""


def static_token(token: str, who: Caller) -> Authenticate:
    """One token (compared in constant time) standing for one caller: the scorer's `--token`, a process's own."""
    expected = token.encode()

    def authenticate(offered: str) -> Caller | None:
        return who if expected and hmac.compare_digest(offered.encode(), expected) else None

    return authenticate


def first_of(*ways: Authenticate | None) -> Authenticate | None:
    """The first answer of several ways to authenticate (None when none is given)."""
    given = [w for w in ways if w is not None]
    if not given:
        return None

    def authenticate(token: str) -> Caller | None:
        return next((found for w in given if (found := w(token)) is not None), None)

    return authenticate


def check(authenticate: Authenticate, token: str, method: str) -> Caller:
    """The caller `token` stands for, if its role may call `method`; Unauthenticated / PermissionDenied else."""
    found = authenticate(token) if token else None
    if found is None:
        raise errors.Unauthenticated(
            "missing or wrong bearer token: send `authorization: Bearer TOKEN` of an active account"
        )
    roles = needed(method)
    if found.role not in roles:
        raise errors.PermissionDenied(
            f"{method.lstrip('/')} needs the role {spelled(roles)}; {found.name} is {found.role}"
        )
    return found


class Guard(grpc.ServerInterceptor):
    """The interceptor described above; `authenticate` maps a bearer token to its account."""

    def __init__(self, authenticate: Authenticate) -> None:
        self.authenticate = authenticate

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        method = details.method
        if method.startswith(OPEN):
            return continuation(details)
        handler = continuation(details)
        if handler is None:  # an unknown method: gRPC answers UNIMPLEMENTED
            return None
        try:
            who = check(self.authenticate, bearer_token(details.invocation_metadata), method)
        except (errors.Unauthenticated, errors.PermissionDenied) as e:
            log.info("%s refused: %s", method, e)
            return _refusal(handler, e)
        return _as(handler, who)


def _refusal(handler: grpc.RpcMethodHandler, error: errors.CheemsError) -> grpc.RpcMethodHandler:
    """A handler of the method's shape that ends the call with `error`, reading none of the request."""

    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        abort(context, error)

    return _handler(handler, refuse, raw=True)


def _as(handler: grpc.RpcMethodHandler, who: Caller) -> grpc.RpcMethodHandler:
    """The handler with `caller()` returning `who` while it runs (streamed replies included)."""
    behaviour = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream

    def run(request: Any, context: grpc.ServicerContext) -> Any:
        token = _CALLER.set(who)
        try:
            return behaviour(request, context)
        finally:
            _CALLER.reset(token)

    def run_streaming(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        token = _CALLER.set(who)
        try:
            yield from behaviour(request, context)
        finally:
            _CALLER.reset(token)

    return _handler(handler, run_streaming if handler.response_streaming else run)


def _handler(handler: grpc.RpcMethodHandler, behaviour: Callable[..., Any], raw: bool = False) -> Any:
    """A method handler of `handler`'s shape running `behaviour`; `raw`: the request's bytes are not parsed."""
    deserializer = None if raw else handler.request_deserializer
    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behaviour, deserializer, serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behaviour, deserializer, serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behaviour, deserializer, serializer)
    return grpc.unary_unary_rpc_method_handler(behaviour, deserializer, serializer)
