"""Service hosting: HostConfig checks, gRPC health (readiness, liveness) and reflection on a real server,
stop and SIGTERM drain, the heartbeat that turns a consumer's health NOT_SERVING when it stalls, and TLS on the port
with an account's token over it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from cheems.errors import InvalidInput
from cheems.roles import OPERATOR, Caller
from services.access import Guard
from services.channels import open_channel, tls_credentials
from services.hosting import LIVENESS, GrpcHost, Heartbeat, HostConfig
from tests.services.tls import self_signed

NAMES = ["cheems.test.One", "cheems.test.Two"]
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def grpc_host() -> Iterator[GrpcHost]:
    running = GrpcHost(HostConfig(port=0, host="127.0.0.1", workers=2), names=NAMES).start()
    yield running
    running.stop(0)


def check(port: int, service: str = "") -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status)


def statuses(port: int) -> list[int]:
    return [check(port, name) for name in ["", *NAMES]]


def wait_until(predicate, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": -1}, "port must be in 0..65535"),
        ({"port": 65536}, "port must be in 0..65535"),
        ({"workers": 0}, "workers must be >= 1"),
    ],
)
def test_host_config_rejects_bad_values(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HostConfig(port=changes.get("port", 0), workers=changes.get("workers", 8))


def test_host_config_accepts_the_edges() -> None:
    assert HostConfig(port=0).port == 0 and HostConfig(port=65535, workers=1).workers == 1


def test_not_serving_until_set_serving_for_every_name(grpc_host: GrpcHost) -> None:
    assert statuses(grpc_host.port) == [NOT_SERVING] * 3
    assert check(grpc_host.port, LIVENESS) == SERVING  # alive while not ready: no restart
    grpc_host.set_serving(True)
    assert statuses(grpc_host.port) == [SERVING] * 3
    grpc_host.set_serving(False)
    assert statuses(grpc_host.port) == [NOT_SERVING] * 3
    grpc_host.set_alive(False)
    assert check(grpc_host.port, LIVENESS) == NOT_SERVING and check(grpc_host.port) == NOT_SERVING


def test_unknown_service_is_not_found(grpc_host: GrpcHost) -> None:
    with pytest.raises(grpc.RpcError) as info:
        check(grpc_host.port, "cheems.test.Missing")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_the_hosted_services(grpc_host: GrpcHost) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_host.port}") as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert services >= {*NAMES, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}


def test_stop_turns_not_serving_and_closes_the_port() -> None:
    grpc_host = GrpcHost(HostConfig(port=0, host="127.0.0.1"), names=NAMES).start()
    grpc_host.set_serving(True)
    assert statuses(grpc_host.port) == [SERVING] * 3
    grpc_host.stop(0)
    for name in ["", *NAMES]:
        assert grpc_host.health.Check(health_pb2.HealthCheckRequest(service=name), None).status == NOT_SERVING
    with pytest.raises(grpc.RpcError) as info:
        check(grpc_host.port)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_sigterm_runs_on_stop_and_drains() -> None:
    """wait_for_signal in the main thread returns after SIGTERM, having run on_stop and stopped the server."""
    grpc_host = GrpcHost(HostConfig(port=0, host="127.0.0.1", drain_seconds=5), names=NAMES).start()
    grpc_host.set_serving(True)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stopped: list[bool] = []

    def send_when_installed() -> None:
        wait_until(lambda: signal.getsignal(signal.SIGTERM) is not before[0], "the SIGTERM handler")
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send_when_installed, daemon=True)
    sender.start()
    try:
        grpc_host.wait_for_signal(on_stop=lambda: stopped.append(True))
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
        grpc_host.stop(0)
    assert stopped == [True]
    assert grpc_host.health.Check(health_pb2.HealthCheckRequest(service=""), None).status == NOT_SERVING
    with pytest.raises(grpc.RpcError):
        check(grpc_host.port)


def test_heartbeat_rejects_a_non_positive_staleness(grpc_host: GrpcHost) -> None:
    with pytest.raises(ValueError, match="stale_after must be > 0"):
        Heartbeat(grpc_host, 0)


def test_heartbeat_follows_the_beats(grpc_host: GrpcHost) -> None:
    clock = FakeClock()
    heartbeat = Heartbeat(grpc_host, stale_after=10, clock=clock)
    assert statuses(grpc_host.port) == [NOT_SERVING] * 3
    heartbeat.beat()
    assert statuses(grpc_host.port) == [SERVING] * 3 and check(grpc_host.port, LIVENESS) == SERVING
    clock.now += 10
    assert heartbeat.check() and check(grpc_host.port) == SERVING  # exactly stale_after: still fresh
    clock.now += 0.5
    assert not heartbeat.check()
    assert statuses(grpc_host.port) == [NOT_SERVING] * 3 and check(grpc_host.port, LIVENESS) == NOT_SERVING
    heartbeat.beat()
    assert statuses(grpc_host.port) == [SERVING] * 3 and check(grpc_host.port, LIVENESS) == SERVING


def test_a_liveness_only_heartbeat_leaves_readiness_alone(grpc_host: GrpcHost) -> None:
    """A process whose gRPC service keeps serving when its consumer loop stalls (annotation's sample intake)."""
    clock = FakeClock()
    grpc_host.set_serving(True)
    heartbeat = Heartbeat(grpc_host, stale_after=5, clock=clock, readiness=False)
    heartbeat.beat()
    clock.now += 6
    assert not heartbeat.check()
    assert statuses(grpc_host.port) == [SERVING] * 3 and check(grpc_host.port, LIVENESS) == NOT_SERVING


def test_watch_notices_a_stalled_loop_on_its_own(grpc_host: GrpcHost) -> None:
    clock = FakeClock()
    heartbeat = Heartbeat(grpc_host, stale_after=5, clock=clock)
    heartbeat.beat()
    stop = threading.Event()
    thread = heartbeat.watch(stop, every=0.01)
    try:
        assert check(grpc_host.port) == SERVING
        clock.now += 6  # no beat and no check() from here: only the watcher can notice
        wait_until(lambda: check(grpc_host.port) == NOT_SERVING, "the watcher to turn NOT_SERVING")
        assert check(grpc_host.port, LIVENESS) == NOT_SERVING
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_tls_only_and_a_token_over_it(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    with pytest.raises(ValueError, match="tls_cert and tls_key must be given together"):
        HostConfig(port=0, tls_cert=str(cert))
    with pytest.raises(InvalidInput, match="cannot read the TLS certificate"):
        GrpcHost(HostConfig(port=0, tls_cert=str(cert), tls_key=str(tmp_path / "none.pem")))
    seen: list[str] = []

    def authenticate(token: str) -> Caller | None:
        seen.append(token)
        return Caller("ops", OPERATOR) if token == "t0ken-over-tls-0123" else None

    config = HostConfig(port=0, host="127.0.0.1", workers=2, tls_cert=str(cert), tls_key=str(key))
    running = GrpcHost(config, names=NAMES, guard=Guard(authenticate)).start()
    running.set_serving(True)
    try:
        target = f"localhost:{running.port}"
        with open_channel(target, tls_credentials(cert), token="t0ken-over-tls-0123") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert reply.status == SERVING
            method = channel.unary_unary("/cheems.v1.IngestionService/GetSample")
            with pytest.raises(grpc.RpcError) as info:
                method(b"", timeout=10)  # the channel sent the token: the guard let it through to a missing method
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with grpc.insecure_channel(target) as plain:  # the port speaks TLS only
            with pytest.raises(grpc.RpcError) as info:
                health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        running.stop(0)
    with pytest.raises(InvalidInput, match="cannot read the TLS CA file"):
        tls_credentials(tmp_path / "missing.pem")
    assert tls_credentials("") is None
