"""`VllmBackend` against a local HTTP server that answers as vLLM's /pooling does, and as it fails."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from cheems.processes.ports import free_port
from services.scorer.deadline import Deadline
from services.scorer.errors import BackendUnavailable, DeadlineExceeded, ScorerError
from services.scorer.vllm.client import VllmBackend, host_port, rewards


class Engine(BaseHTTPRequestHandler):
    """Rewards = sum of ids / 100, returned in reverse order (the index says which is which); `mode` breaks it."""

    protocol_version = "HTTP/1.1"  # connections kept alive, as uvicorn keeps them
    mode = "ok"
    seen: ClassVar[list[Any]] = []
    connections: ClassVar[list[Any]] = []

    def do_GET(self) -> None:  # /health
        self.send_response(200 if self.mode != "down" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        type(self).connections.append(self.connection)
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "dead":
            self.reply(500, {"error": {"message": "EngineCore encountered an issue"}})
        elif self.mode == "refuse":
            self.reply(400, {"error": {"message": "This model's maximum context length is 16 tokens"}})
        elif self.mode == "short":
            self.reply(200, {"data": [{"index": 0, "data": [1.0]}]})
        elif self.mode == "garbage":
            self.reply(200, {"nothing": True})
        else:
            items = [{"index": i, "data": [sum(ids) / 100]} for i, ids in enumerate(body["input"])]
            self.reply(200, {"data": items[::-1]})

    def reply(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a caller past its deadline left
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[tuple[type[Engine], str]]:
    handler = type("Handler", (Engine,), {"mode": "ok", "seen": [], "connections": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_token_ids_go_out_and_rewards_come_back_in_order(engine: tuple[type[Engine], str]) -> None:
    handler, url = engine
    backend = VllmBackend(url, "cheems_rm")
    assert backend.score([[1, 2], [3, 4, 5], [100]]) == [0.03, 0.12, 1.0]
    assert handler.seen[-1] == {"model": "cheems_rm", "input": [[1, 2], [3, 4, 5], [100]]}
    assert backend.score([[7]]) == [0.07]  # the kept-alive connection serves the next call
    assert backend.ready()
    handler.mode = "down"
    assert not backend.ready()


@pytest.mark.parametrize(
    ("mode", "error", "said"),
    [
        ("dead", BackendUnavailable, "EngineCore encountered an issue"),
        ("refuse", ScorerError, "maximum context length"),
        ("short", ScorerError, "1 rewards for 2 sequences"),
        ("garbage", ScorerError, "not a pooling result"),
    ],
)
def test_what_the_engine_says_wrong_becomes_a_clear_error(
    engine: tuple[type[Engine], str], mode: str, error: type[Exception], said: str
) -> None:
    handler, url = engine
    handler.mode = mode
    with pytest.raises(error, match=said) as raised:
        VllmBackend(url, "m").score([[1], [2]])
    assert mode != "refuse" or not isinstance(raised.value, BackendUnavailable)  # a refusal is not retryable


def test_a_call_past_its_deadline_and_an_engine_gone(engine: tuple[type[Engine], str]) -> None:
    handler, url = engine
    handler.mode = "slow"
    with pytest.raises(DeadlineExceeded):
        VllmBackend(url, "m").score([[1]], Deadline.of(0.2, 300))
    with pytest.raises(BackendUnavailable, match="unreachable"):
        VllmBackend(f"127.0.0.1:{free_port()}", "m").score([[1]])


def test_a_kept_alive_connection_the_server_closed_is_replaced(engine: tuple[type[Engine], str]) -> None:
    handler, url = engine
    backend = VllmBackend(url, "m")
    assert backend.score([[1]]) == [0.01]
    handler.connections[-1].shutdown(socket.SHUT_RDWR)  # the server's keep-alive ran out
    assert backend.score([[2]]) == [0.02]
    assert len({id(c) for c in handler.connections}) == 2  # the second call went on a new connection


def test_reconnect_moves_calls_to_the_new_address(engine: tuple[type[Engine], str]) -> None:
    _, url = engine
    backend = VllmBackend(f"127.0.0.1:{free_port()}", "m")
    assert not backend.ready()
    backend.reconnect(f"http://{url}/")
    assert backend.score([[50]]) == [0.5]
    backend.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        backend.score([[1]])


def test_addresses_and_replies_are_checked() -> None:
    assert host_port("http://10.0.0.1:8000/") == "10.0.0.1:8000"
    for bad in ("8000", "host:", "host:port"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            host_port(bad)
    assert rewards(b'{"data": [{"index": 1, "data": 2.5}, {"index": 0, "data": [1]}]}', 2) == [1.0, 2.5]
    with pytest.raises(ScorerError, match="non-finite"):
        rewards(b'{"data": [{"index": 0, "data": [NaN]}]}', 1)
    with pytest.raises(ScorerError, match="not a pooling result"):
        rewards(b'{"data": [{"index": 5, "data": [1]}]}', 1)
