"""The vLLM engine's API key without vLLM: the key guard in front of a real Starlette app served by uvicorn (as vLLM
adds it: `app.add_middleware(KeyGuard)`), the engine's command line and environment, and the key of an engine at
--vllm-url (`--vllm-api-key-file`) against a local HTTP stand-in that checks it as vLLM does."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from cheems.errors import ConfigError
from services.scorer.config import ScorerConfig
from services.scorer.errors import BackendUnavailable
from services.scorer.telemetry.backends import fetch, vllm_source
from services.scorer.vllm.client import VllmBackend
from services.scorer.vllm.engine import (
    GUARD_MODULE,
    EngineOptions,
    engine_command,
    engine_environment,
    guard_folder,
)
from services.scorer.vllm.keyguard import KeyGuard
from services.scorer.vllm.serving import vllm_backend

KEY = "k3y-Zq8WmN2vR7tY4uP9sL6xC1bH5jD0"


def get(url: str, path: str, key: str = "", scheme: str = "Bearer", method: str = "GET") -> tuple[int, bytes]:
    host, _, port = url.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Authorization": f"{scheme} {key}"} if key else {}
    try:
        connection.request(method, path, b"{}" if method == "POST" else None, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    """A Starlette app with vLLM's routes the scorer uses, the guard added as vLLM's --middleware adds it."""

    async def pooling(request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"index": 0, "data": [1.0]}]})

    routes = [
        Route("/health", lambda r: PlainTextResponse("")),
        Route("/metrics", lambda r: PlainTextResponse("vllm:num_requests_running 0\n")),
        Route("/pooling", pooling, methods=["POST"]),
        Route("/v1/models", lambda r: JSONResponse({"data": [{"id": "rm"}]})),
    ]
    app = Starlette(routes=routes)
    saved = os.environ.get("VLLM_API_KEY")
    os.environ["VLLM_API_KEY"] = KEY
    try:
        app.add_middleware(KeyGuard)
        app.middleware_stack = app.build_middleware_stack()  # the key is read here, once, as the engine reads it
    finally:
        os.environ.pop("VLLM_API_KEY") if saved is None else os.environ.update(VLLM_API_KEY=saved)
    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning", lifespan="off", log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait(lambda: server.started, 30)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def wait(condition: Callable[[], object], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_every_route_but_health_wants_the_key(guarded: str) -> None:
    assert get(guarded, "/health")[0] == 200
    for path, method in (("/pooling", "POST"), ("/metrics", "GET"), ("/v1/models", "GET"), ("/healthz", "GET")):
        assert get(guarded, path, method=method) == (401, b'{"error": "Unauthorized"}'), path
        assert get(guarded, path, "wrong-key", method=method)[0] == 401, path
        assert get(guarded, path, KEY, scheme="Basic", method=method)[0] == 401, path
        assert get(guarded, path, KEY, method=method)[0] != 401, path
    assert get(guarded, "/pooling", KEY, method="POST")[0] == 200


def test_the_scorers_calls_and_scrapes_carry_the_key(guarded: str) -> None:
    assert VllmBackend(guarded, "rm", api_key=KEY).score([[1]]) == [1.0]
    assert VllmBackend(guarded, "rm", api_key=KEY).ready()
    with pytest.raises(BackendUnavailable, match="refused the scorer's API key") as refused:
        VllmBackend(guarded, "rm", api_key="not-the-key").score([[1]])
    assert "not-the-key" not in str(refused.value)
    backend = VllmBackend(guarded, "rm")
    backend.reconnect(guarded, KEY)  # a restarted engine: its new address and its new key
    assert backend.score([[1]]) == [1.0] and KEY not in repr(backend)
    source = vllm_source(guarded, {"rm": "rm-1"}, KEY)
    assert "vllm:num_requests_running" in fetch(source.url, token=source.token) and KEY not in repr(source)
    with pytest.raises(OSError, match="401"):
        fetch(source.url)


def test_the_guard_refuses_to_start_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="VLLM_API_KEY is not set"):
        KeyGuard(lambda scope, receive, send: None)  # type: ignore[arg-type,return-value]


def test_the_engine_gets_the_key_in_its_environment_never_on_its_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "the-scorers-own-environment")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    folder = guard_folder()
    try:
        assert os.stat(folder).st_mode & 0o777 == 0o700
        options = EngineOptions("py", device="cpu")
        command = engine_command("/models/rm", "cheems_rm", 8123, options)
        assert command[command.index("--middleware") + 1] == f"{GUARD_MODULE}.KeyGuard"
        assert not any(KEY in part for part in command) and "--api-key" not in command
        env = engine_environment(options, KEY, folder)
        assert env["VLLM_API_KEY"] == KEY and env["PYTHONPATH"] == f"{folder}{os.pathsep}/elsewhere"
        assert "VLLM_API_KEY" not in engine_environment(options)  # never a key inherited from the scorer
        # the copy imports the standard library only: it runs in vLLM's environment, where the project is not
        probe = "import sys, cheems_vllm_keyguard; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
            "('services', 'cheems', 'starlette')))"  # fmt: skip
        run = subprocess.run(
            [sys.executable, "-c", probe], env={"PYTHONPATH": folder}, capture_output=True, text=True, timeout=60
        )
        assert (run.returncode, run.stdout.strip()) == (0, "[]"), run.stderr
    finally:
        import shutil

        shutil.rmtree(folder)


class External(BaseHTTPRequestHandler):
    """A vLLM server someone else runs with --api-key: /v1/* and /pooling want the key (/health does not)."""

    key = KEY

    def do_GET(self) -> None:
        if self.path == "/health":
            self.reply(200, {})
        elif self.headers.get("Authorization") != f"Bearer {self.key}":
            self.reply(401, {"error": "Unauthorized"})
        else:
            self.reply(200, {"data": [{"id": "rm-external"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {self.key}":
            self.reply(401, {"error": "Unauthorized"})
        else:
            self.reply(200, {"data": [{"index": i, "data": [len(ids)]} for i, ids in enumerate(body["input"])]})

    def reply(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def external() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), External)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def key_file(folder: Path, key: str) -> str:
    path = folder / "vllm.key"
    path.write_text(key + "\n")
    path.chmod(0o600)
    return str(path)


def test_an_external_engine_gets_the_key_in_the_file(external: str, tmp_path: Path) -> None:
    config = ScorerConfig(backend="vllm", vllm_url=external, vllm_api_key_file=key_file(tmp_path, KEY))
    backend, engine = vllm_backend(config, "unused")
    assert engine is None and backend.model_name == "rm-external" and backend.score([[1, 2, 3]]) == [3.0]
    for given in ("", "not-the-key"):  # no key, a wrong one: one line at start, naming the server and the option
        update = {"vllm_api_key_file": key_file(tmp_path, given) if given else ""}
        for name in ("", "rm-external"):  # asked even when the name is given
            with pytest.raises(ConfigError, match=f"the vLLM server at {external} refused .*HTTP 401") as refused:
                vllm_backend(config.model_copy(update={**update, "vllm_model_name": name}), "unused")
            assert "\n" not in str(refused.value) and "--vllm-api-key-file" in str(refused.value)
            assert "not-the-key" not in str(refused.value)


def test_the_key_file_is_for_an_external_engine_and_must_be_readable(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vllm_api_key_file"):
        ScorerConfig(backend="vllm", vllm_api_key_file=key_file(tmp_path, KEY))  # the scorer's own engine: its own
    with pytest.raises(ValueError, match="cannot read"):
        ScorerConfig(backend="vllm", vllm_url="127.0.0.1:8000", vllm_api_key_file=str(tmp_path / "missing"))


def test_cheems_serve_with_a_refused_key_says_so_in_one_line(
    external: str, tmp_path: Path, tiny_checkpoint: Callable[..., Path]
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "serve", "--backend", "vllm", "--vllm-url", external,
         "--vllm-api-key-file", key_file(tmp_path, "not-the-key"), "--model", str(tiny_checkpoint()),
         "--grpc-port", "0", "--http-port", "-1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"the vLLM server at {external} refused the key in --vllm-api-key-file" in lines[0]
    assert "not-the-key" not in run.stderr + run.stdout
