"""gRPC channels to the project's services, spread over every replica.

    channel = open_channel("dns:///cheems-scorer-headless.cheems:50051")   # or host:port, ipv4:a:p,b:p, unix:...
    channel = open_channel(target, tls_credentials("ca.pem"))             # TLS, the servers' CA
    channel = open_channel(target, token=token)                           # every call: authorization: Bearer
    channel = open_aio_channel(target)                                    # asyncio

A target is any gRPC target URI. The channel resolves it to every address it names (a headless Service's DNS
name gives one per ready pod) and sends calls round-robin over them, instead of gRPC's default of one
connection to the first address, which would put all calls of one client on one replica. Keepalive pings every
30 s find a dead connection (a pod gone without a FIN) in seconds rather than at the next call's deadline; the
servers accept them (`services.hosting.server_options`). A call that fails as UNAVAILABLE on a replica that just
went away is retried by the callers' own retry policy (`RewardClient`), and round-robin moves it elsewhere.
With `token`, every call carries `authorization: Bearer TOKEN` (an account's, `services.access`), over TLS or not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from cheems.errors import InvalidInput
from services.observe import tracing

KEEPALIVE_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
]


def channel_options(extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The options above, with `extra` added (or replacing one of the same name)."""
    names = {name for name, _ in extra}
    return [*(o for o in CHANNEL_OPTIONS if o[0] not in names), *extra]


def open_channel(
    target: str,
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
    token: str = "",
) -> grpc.Channel:
    opts = channel_options(options)
    if credentials is not None:
        channel = grpc.secure_channel(target, credentials, options=opts)
    else:
        channel = grpc.insecure_channel(target, options=opts)
    channel = tracing.traced_channel(channel)  # a client span per call while tracing is on
    return grpc.intercept_channel(channel, Bearer(token)) if token else channel


def tls_credentials(ca_file: str | Path | None) -> grpc.ChannelCredentials | None:
    """TLS trusting the CA in `ca_file` (PEM); None without one (plaintext). InvalidInput for a file not read."""
    if not ca_file:
        return None
    try:
        return grpc.ssl_channel_credentials(root_certificates=Path(ca_file).read_bytes())
    except OSError as e:
        raise InvalidInput(f"cannot read the TLS CA file {ca_file}: {e.strerror or e}") from None


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Sequence[tuple[str, str | bytes]] | None
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `authorization: Bearer TOKEN` to every call of a channel (a call's own header wins)."""

    def __init__(self, token: str) -> None:
        self.header = ("authorization", f"Bearer {token}")

    def _details(self, details: Any) -> _Details:
        metadata = list(details.metadata or ())
        if not any(key == "authorization" for key, _ in metadata):
            metadata.append(self.header)
        return _Details(
            details.method, details.timeout, metadata, details.credentials,
            getattr(details, "wait_for_ready", None), getattr(details, "compression", None),
        )  # fmt: skip

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def open_aio_channel(target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        target, options=channel_options(options), interceptors=tracing.aio_client_interceptors() or None
    )
