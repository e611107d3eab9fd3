"""`cheems serve` and `cheems score` as processes: serving, a quick check, and a graceful drain on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from cheems.processes.ports import free_port


def test_serve_score_and_sigterm(tiny_model: Path) -> None:
    port = free_port()
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cheems_cli",
            "serve",
            "--model",
            str(tiny_model),
            "--backend",
            "torch",
            "--grpc-port",
            str(port),
            "--http-port",
            "-1",
            "--host",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = serve.stdout.readline() if serve.stdout else ""
        assert line.startswith("serving:"), (line, serve.stderr.read() if serve.stderr else "")
        score = subprocess.run(
            [
                sys.executable,
                "-m",
                "cheems_cli",
                "score",
                "--model-url",
                f"127.0.0.1:{port}",
                "--prompt",
                "你好",
                "--response",
                "你好！",
                "--response",
                "不好",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert score.returncode == 0, score.stderr
        lines = score.stdout.splitlines()
        assert len(lines) == 2 and sum(line.startswith("*") for line in lines) == 1
        bad = subprocess.run(
            [
                sys.executable,
                "-m",
                "cheems_cli",
                "score",
                "--model-url",
                f"127.0.0.1:{port}",
                "--prompt",
                "",
                "--response",
                "x",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert bad.returncode == 2 and "INVALID_ARGUMENT: prompt is empty" in bad.stderr
        started = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0
        assert time.monotonic() - started < 30
    finally:
        if serve.poll() is None:
            serve.kill()
