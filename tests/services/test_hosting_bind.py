"""A taken port is refused, never shared: gRPC's default SO_REUSEPORT would let a second server bind the same
port and split the connections between two processes. Scorer (gRPC and HTTP ports) and GrpcHost alike."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cheems.errors import PortInUse
from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.hosting import GrpcHost, HostConfig
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

REQUEST = reward_pb2.ScoreRequest(prompt="你好", responses=["你好！", "您好，有什么可以帮您？"])


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=1)


def config(model: Path, grpc_port: int = 0, http_port: int = 0) -> ScorerConfig:
    return ScorerConfig(model=str(model), backend="torch", host="127.0.0.1", grpc_port=grpc_port, http_port=http_port)


@pytest.fixture(scope="module")
def first(model: Path) -> Iterator[ScorerServer]:
    server = ScorerServer(config(model)).start()
    yield server
    server.stop(grace=1)


def scores(port: int) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return list(reward_pb2_grpc.RewardServiceStub(channel).Score(REQUEST, timeout=60).scores)


def health_status(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return int(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status)


def closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_defaults_listen_on_this_machine_only() -> None:
    assert HostConfig(port=0).host == "127.0.0.1"
    assert ScorerConfig().host == "127.0.0.1"


def test_a_second_scorer_on_the_same_grpc_port_refuses(first: ScorerServer, model: Path) -> None:
    expected = scores(first.grpc_port)
    second = ScorerServer(config(model, grpc_port=first.grpc_port))
    with pytest.raises(PortInUse, match=rf"cannot listen on 127\.0\.0\.1:{first.grpc_port}: the address is in use"):
        second.start()
    assert second._http is None  # it stopped before opening anything else
    for _ in range(8):  # every connection still reaches the first server (none is split off to a second one)
        assert scores(first.grpc_port) == pytest.approx(expected, abs=1e-6)


def test_a_second_scorer_on_the_same_http_port_refuses_and_releases_its_grpc_port(
    first: ScorerServer, model: Path
) -> None:
    second = ScorerServer(config(model, http_port=first.http_port))
    with pytest.raises(PortInUse, match=rf"127\.0\.0\.1:{first.http_port} for HTTP"):
        second.start()
    assert second.grpc_port != 0 and closed(second.grpc_port)  # its gRPC server had started: stopped again
    assert scores(first.grpc_port)
    with socket.create_connection(("127.0.0.1", first.http_port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")


def test_a_grpc_host_on_a_taken_port_refuses(first: ScorerServer) -> None:
    with pytest.raises(PortInUse, match=rf"127\.0\.0\.1:{first.grpc_port}: the address is in use"):
        GrpcHost(HostConfig(port=first.grpc_port))
    host = GrpcHost(HostConfig(port=0, workers=2)).start()
    try:
        with pytest.raises(PortInUse, match="the address is in use"):
            GrpcHost(HostConfig(port=host.port, workers=2))
        assert health_status(host.port) == health_pb2.HealthCheckResponse.NOT_SERVING  # the first still answers
    finally:
        host.stop(0)
    assert scores(first.grpc_port)


@pytest.fixture
def plain_grpc_server() -> Iterator[int]:
    """A gRPC server as anyone writes it: default options, so SO_REUSEPORT is on."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0).wait()


def test_a_port_held_by_a_default_grpc_server_is_refused_too(plain_grpc_server: int, model: Path) -> None:
    port = plain_grpc_server
    with pytest.raises(PortInUse, match=f"127.0.0.1:{port}"):
        ScorerServer(config(model, grpc_port=port)).start()
    with pytest.raises(PortInUse, match=f"127.0.0.1:{port}"):
        GrpcHost(HostConfig(port=port, workers=2))
    for _ in range(8):
        assert health_status(port) == health_pb2.HealthCheckResponse.SERVING


def test_a_port_held_by_a_plain_socket_is_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(PortInUse, match=f"127.0.0.1:{s.getsockname()[1]}"):
            GrpcHost(HostConfig(port=s.getsockname()[1], workers=2))
