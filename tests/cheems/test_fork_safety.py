"""A process serving gRPC can fork and exec while other threads are inside gRPC (the scorer starting a Triton
beside the one serving): importing any package of the project turns gRPC's fork handlers off before grpc loads.

With the handlers on (grpcio 1.81's default), the script below lost about 3 forks in 200 here (the child aborted
before exec: `sh` reads an empty session pipe, "not enough values to unpack") and now and then hung."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FORKS_UNDER_LOAD = textwrap.dedent(
    """
    import threading
    import services  # the scorer's own package, first, as its modules import it
    import grpc
    import sh
    from concurrent import futures
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(8))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    done = threading.Event()

    def call_forever():
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not done.is_set():
                stub.Check(health_pb2.HealthCheckRequest())

    threads = [threading.Thread(target=call_forever) for _ in range(4)]
    for t in threads:
        t.start()
    failed = 0
    for _ in range(150):
        try:
            sh.true()
        except Exception:
            failed += 1
    done.set()
    for t in threads:
        t.join()
    server.stop(None)
    print("failed", failed)
    """
)


def _python(code: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _env_without_setting() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}


@pytest.mark.parametrize("package", ["cheems", "services", "evaluator", "trainer", "system", "cheems_cli"])
def test_every_top_level_package_turns_grpc_fork_handlers_off(package: str) -> None:
    code = f"import {package}, os; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'))"
    done = _python(code, _env_without_setting(), 60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "false"


def test_a_value_the_user_set_wins() -> None:
    env = {**_env_without_setting(), "GRPC_ENABLE_FORK_SUPPORT": "true"}
    done = _python("import services, os; print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])", env, 60)
    assert done.stdout.strip() == "true", done.stderr


def test_forks_while_other_threads_call_grpc_all_exec() -> None:
    done = _python(FORKS_UNDER_LOAD, _env_without_setting(), 120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "failed 0", done.stderr[-2000:]
    assert "skipping fork() handlers" not in done.stderr
