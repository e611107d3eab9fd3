"""`cheems service evaluation --http-port`: the leaderboard served by the evaluation service's own process,
announced on stdout, beside gRPC, until SIGTERM; a taken HTTP port stops it at once with exit code 3."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from services.bus.broker import EmbeddedBroker
from services.store.migrate import upgrade

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"


def command(bootstrap: str, db: str, http_port: int) -> list[str]:
    return [sys.executable, "-m", "cheems_cli", "service", "evaluation", "--bootstrap", bootstrap, "--db", db,
            "--bench-root", str(SAMPLE), "--port", "0", "--http-port", str(http_port)]  # fmt: skip


def announced(process: subprocess.Popen[str], prefix: str, timeout: float = 60.0) -> str:
    """The rest of the first stdout line starting with `prefix`."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"the service ended (rc {process.wait()}): {process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise AssertionError(f"no {prefix!r} line within {timeout} s")


def test_the_evaluation_service_serves_the_leaderboard_until_sigterm(broker: EmbeddedBroker, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    upgrade(db)
    service = subprocess.Popen(command(broker.bootstrap, db, 0), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        base = announced(service, "evaluation: leaderboard ").rstrip("/")
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base}/health", timeout=30) as reply:
            assert json.load(reply) == {"status": "serving"}
        with urllib.request.urlopen(f"{base}/api/leaderboard", timeout=30) as reply:
            assert json.load(reply) == {"subsets": [], "models": []}
        with urllib.request.urlopen(f"{base}/", timeout=30) as reply:
            assert 'id="empty"' in reply.read().decode()
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0, service.stderr.read()[-2000:]  # type: ignore[union-attr]
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()


def test_a_taken_http_port_stops_the_service_with_exit_code_3(broker: EmbeddedBroker, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    upgrade(db)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = subprocess.run(command(broker.bootstrap, db, port), capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stderr[-2000:]
    assert f"cannot listen on 127.0.0.1:{port} for HTTP" in run.stderr and "Traceback" not in run.stderr
