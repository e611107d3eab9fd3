"""The scorer under faults, with real processes: Triton SIGKILLed under load, SIGTERM with calls in flight.

What must hold: no client waits past its deadline; health tells the truth throughout (readiness
NOT_SERVING while Triton is down, SERVING once it is back, liveness NOT_SERVING only when the
scorer gives up); the scorer recovers on its own; and no Triton process outlives the scorer.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cheems import processes
from cheems.processes.ports import free_port
from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer

SERVING = health_pb2.HealthCheckResponse.SERVING
REQUEST = reward_pb2.ScoreRequest(prompt="你好", responses=["你好！有什么可以帮你？", "滚"])
pytestmark = pytest.mark.slow


def health(port: int, service: str = "") -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status)


def probe(port: int, service: str = "") -> int | None:
    """`health` as a kubelet probe sees it: an answer later than the probe's 5 s timeout is a failed probe (None),
    tried again, not the end of the test (seen in CI while Triton restarted on two loaded cores)."""
    try:
        return health(port, service)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        return None


def wait_for(condition: Any, seconds: float, every: float = 0.1) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every)
    return False


@pytest.fixture(scope="module")
def own_triton(tiny_model: Path) -> Iterator[ScorerServer]:
    """A scorer with a Triton of its own (killed by the tests here), shared by the module: each test counts the
    restarts it caused from the count it found, and waits until the scorer serves again before it ends."""
    config = ScorerConfig(
        model=str(tiny_model), host="127.0.0.1", grpc_port=0, http_port=-1, backend="triton", watch_seconds=0.2
    )
    server = ScorerServer(config).start()
    try:
        yield server
    finally:
        server.stop(grace=1)


def test_sigkill_triton_under_load_recovers_and_health_tells_the_truth(own_triton: ScorerServer) -> None:
    server, host = own_triton, own_triton.host
    assert host is not None and host.pid is not None
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    stub = reward_pb2_grpc.RewardServiceStub(channel)
    before = list(stub.Score(REQUEST, timeout=30).scores)
    assert server.supervisor is not None
    restarts = server.supervisor.restarts
    old_tree = processes.tree(host.pid)
    assert len(old_tree) >= 2, "tritonserver and its Python-backend stub"

    stop = threading.Event()
    overdue: list[float] = []
    outcomes: dict[str, int] = {}
    lock = threading.Lock()

    def client() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                stub.Score(REQUEST, timeout=3)
                outcome = "OK"
            except grpc.RpcError as e:
                outcome = e.code().name
            took = time.monotonic() - started
            with lock:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                # twice the deadline: client threads share the GIL with this in-process scorer while Triton
                # restarts on two busy cores (4.9 s seen in CI); a call held until Triton is back takes 10 s+
                if took > 2 * 3:
                    overdue.append(took)

    clients = [threading.Thread(target=client, daemon=True) for _ in range(8)]
    for t in clients:
        t.start()
    time.sleep(1.0)
    os.kill(host.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    try:
        assert wait_for(lambda: probe(server.grpc_port) != SERVING, 5), "readiness stayed SERVING"
        noticed = time.monotonic() - killed_at
        alive = wait_for(lambda: probe(server.grpc_port, "liveness") == SERVING, 15)
        assert alive, "alive while restarting: no pod restart needed"
        assert wait_for(lambda: probe(server.grpc_port) == SERVING, 120, every=0.3), "Triton never came back"
    finally:
        stop.set()
        for t in clients:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in clients), "a client hung"
    assert not overdue, f"calls outlived their 3 s deadline: {overdue}"
    assert outcomes.get("UNAVAILABLE", 0) > 0 and outcomes.get("OK", 0) > 0, outcomes
    assert set(outcomes) <= {"OK", "UNAVAILABLE", "DEADLINE_EXCEEDED"}, outcomes
    assert noticed < 5
    assert health(server.grpc_port) == SERVING  # back, and a probe answers within its timeout again
    assert list(stub.Score(REQUEST, timeout=30).scores) == pytest.approx(before, abs=1e-5)
    assert server.supervisor.restarts == restarts + 1
    assert not [p for p in old_tree if processes.alive(p)], "processes of the killed Triton survived"
    channel.close()


def python_backend(host_pid: int) -> list[processes.Proc]:
    """The model's Python-backend stub under tritonserver, then what the stub started (PyTriton's helpers)."""
    tree = processes.tree(host_pid)
    stub = next(p for p in tree if "triton_python_backend_stub" in " ".join(processes.command(p.pid)[:1]))
    return [p for p in processes.tree(stub.pid)]


def scores_again(stub: Any, before: list[float], codes: list[str]) -> bool:
    """Whether a Score call answers the scores of before (each failure's code noted)."""
    try:
        return list(stub.Score(REQUEST, timeout=5).scores) == pytest.approx(before, abs=1e-5)
    except grpc.RpcError as e:
        codes.append(e.code().name)
        return False


def test_a_dead_python_backend_stub_or_its_helper_gets_triton_restarted(own_triton: ScorerServer) -> None:
    """tritonserver lives on when its model's stub dies, and every call of the model fails ("Stub process ... is
    not healthy"): the scorer must notice from the failures, answer UNAVAILABLE (retry), never INTERNAL, and
    restart Triton by itself. Then the same with the process the stub started."""
    server, host = own_triton, own_triton.host
    assert host is not None and host.pid is not None
    stub = reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
    before = list(stub.Score(REQUEST, timeout=30).scores)
    assert server.supervisor is not None
    restarts = server.supervisor.restarts
    for round, pick in enumerate((lambda ps: ps[0], lambda ps: ps[-1])):  # the stub; then its last helper
        assert host.pid is not None
        victim = pick(python_backend(host.pid))
        os.kill(victim.pid, signal.SIGKILL)
        codes: list[str] = []
        recovered = functools.partial(scores_again, stub, before, codes)
        assert wait_for(recovered, 120, every=0.5), f"round {round}: never scored again; codes {codes}"
        assert "INTERNAL" not in codes and set(codes) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}, codes
        assert server.supervisor.restarts == restarts + round + 1
        assert health(server.grpc_port) == SERVING


def test_a_scorer_that_cannot_restart_triton_fails_liveness(tiny_model: Path) -> None:
    config = ScorerConfig(
        model=str(tiny_model),
        host="127.0.0.1",
        grpc_port=0,
        http_port=-1,
        backend="triton",
        watch_seconds=0.2,
        triton_restarts=0,
    )
    with ScorerServer(config) as server:
        assert server.host is not None and server.host.pid is not None
        os.kill(server.host.pid, signal.SIGKILL)
        assert server.failed.wait(10), "the scorer did not give up"
        assert health(server.grpc_port) != SERVING
        assert health(server.grpc_port, "liveness") != SERVING
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel, pytest.raises(grpc.RpcError) as info:
            reward_pb2_grpc.RewardServiceStub(channel).Score(REQUEST, timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def serve(model: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "cheems_cli", "serve", "--model", str(model), "--grpc-port", str(port)]
    process = subprocess.Popen(
        [*command, "--http-port", "-1", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    while process.stdout and not (lines and lines[-1].startswith("serving:")) and len(lines) < 20:
        lines.append(process.stdout.readline())  # Triton may print first ("Failed to initialize NVML")
        if not lines[-1]:
            process.wait()
            pytest.fail(f"cheems serve exited: {lines} {process.stderr.read() if process.stderr else ''}")
    return process


def test_sigterm_drains_in_flight_calls_and_leaves_no_process(tiny_model: Path) -> None:
    port = free_port()
    scorer = serve(tiny_model, port, "--backend", "triton", "--max-batch-items", "1000", "--drain-seconds", "60")
    try:
        tree = processes.tree(scorer.pid)
        assert any("tritonserver" in Path(f"/proc/{p.pid}/cmdline").read_text() for p in tree)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        text = "长城是中国古代修建的军事防御工程，绵延上万里。" * 20
        batch = reward_pb2.ScoreBatchRequest(
            items=[reward_pb2.ScoreRequest(prompt=f"问题{i}", responses=[text] * 64) for i in range(40)]
        )
        call = stub.ScoreBatch.future(batch, timeout=120)
        time.sleep(1.0)
        assert not call.done(), "the call should still be running when SIGTERM arrives"
        scorer.send_signal(signal.SIGTERM)
        reply = call.result()
        assert len(reply.results) == 40 and all(len(r.scores) == 64 for r in reply.results)
        assert scorer.wait(timeout=60) == 0
        channel.close()
        assert wait_for(lambda: not [p for p in tree if processes.alive(p)], 10), "a process outlived the scorer"
    finally:
        if scorer.poll() is None:
            scorer.kill()
            scorer.wait()
