"""A `cheems` command as a real process in tests: output in files, health awaited, stopped or killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

CHEEMS = [sys.executable, "-m", "cheems_cli"]
SERVING = health_pb2.HealthCheckResponse.SERVING


class Service:
    """A `cheems` process with its output in files; `stop()` sends SIGTERM and returns the exit code; `env`: its
    whole environment (default: this process's)."""

    def __init__(self, args: Sequence[str], logs: Path, env: dict[str, str] | None = None) -> None:
        self.out, self.err = logs.with_suffix(".out"), logs.with_suffix(".err")
        with self.out.open("wb") as out, self.err.open("wb") as err:
            environment = dict(os.environ) if env is None else env
            self.process = subprocess.Popen([*CHEEMS, *args], stdout=out, stderr=err, env=environment)

    def output(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")[-3000:]

    def wait_serving(
        self, port: int, names: Sequence[str], timeout: float = 60.0, tls: grpc.ChannelCredentials | None = None
    ) -> None:
        """Until health says SERVING for every name (the process must stay up meanwhile); `tls`: the port speaks
        TLS for a `localhost` certificate."""
        deadline = time.monotonic() + timeout
        if tls is not None:
            opened = grpc.secure_channel(f"localhost:{port}", tls)
        else:
            opened = grpc.insecure_channel(f"127.0.0.1:{port}")
        with opened as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                assert self.process.poll() is None, f"exited with {self.process.returncode}:\n{self.output()}"
                try:
                    answers = [stub.Check(health_pb2.HealthCheckRequest(service=n), timeout=2).status for n in names]
                    if answers == [SERVING] * len(names):
                        return
                except grpc.RpcError as e:
                    if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                        raise
                assert time.monotonic() < deadline, f"not SERVING within {timeout} s:\n{self.output()}"
                time.sleep(0.1)

    def stop(self, timeout: float = 30.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0, alive: Service | None = None) -> None:
    """Until `predicate()` holds; fails after `timeout` seconds, or at once if `alive` exited meanwhile."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if alive is not None:
            assert alive.process.poll() is None, f"exited with {alive.process.returncode}:\n{alive.output()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (f"\n{alive.output()}" if alive else "")
        time.sleep(0.1)
