"""gRPC channels to the project's services, spread over every replica.

    channel = open_channel("dns:///cheems-scorer-headless.cheems:50051")   # or host:port, ipv4:a:p,b:p, unix:...
    channel = open_channel(target, credentials)                           # TLS
    channel = open_aio_channel(target)                                    # asyncio

A target is any gRPC target URI. The channel resolves it to every address it names (a headless Service's DNS
name gives one per ready pod) and sends calls round-robin over them, instead of gRPC's default of one
connection to the first address, which would put all calls of one client on one replica. Keepalive pings every
30 s find a dead connection (a pod gone without a FIN) in seconds rather than at the next call's deadline; the
servers accept them (`services.hosting.server_options`). A call that fails as UNAVAILABLE on a replica that just
went away is retried by the callers' own retry policy (`RewardClient`), and round-robin moves it elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import grpc

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
    target: str, credentials: grpc.ChannelCredentials | None = None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.Channel:
    opts = channel_options(options)
    if credentials is not None:
        return grpc.secure_channel(target, credentials, options=opts)
    return grpc.insecure_channel(target, options=opts)


def open_aio_channel(target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target, options=channel_options(options))
