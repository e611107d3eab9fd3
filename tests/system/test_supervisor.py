"""The supervisor with real `cheems` processes: started in order once healthy, a crashed one restarted,
a failing start reported with its log, and nothing left running after stop."""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
from pathlib import Path

import pytest

from system.plan import Process
from system.supervisor import StartFailed, Supervisor, SupervisorConfig, grpc_health, healthy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_restart_and_stop(tmp_path: Path) -> None:
    broker, ingestion = free_port(), free_port()
    db = f"sqlite:///{tmp_path / 'c.db'}"
    processes = [
        Process("broker", ("dev", "broker", "--port", str(broker)), broker, "tcp"),
        Process("migrations", ("db", "upgrade", "--db", db), once=True, health="none"),
        Process("ingestion", ("service", "ingestion", "--db", db, "--bootstrap", f"127.0.0.1:{broker}", "--port",
                              str(ingestion)), ingestion),
    ]  # fmt: skip
    events: list[tuple[str, str]] = []
    system = Supervisor(processes, tmp_path / "logs", SupervisorConfig(backoff=0.2, grace=10))
    with system:
        system.start(lambda name, what, detail: events.append((name, what)))
        assert events == [("broker", "started"), ("broker", "healthy"), ("migrations", "started"),
                          ("migrations", "done"), ("ingestion", "started"), ("ingestion", "healthy")]  # fmt: skip
        pids = system.pids()
        watcher = threading.Thread(target=system.run)
        watcher.start()
        os.kill(pids["ingestion"], signal.SIGKILL)
        for _ in range(120):  # restarted and healthy again
            new = system.pids().get("ingestion")
            if new and new != pids["ingestion"] and grpc_health(f"127.0.0.1:{ingestion}") == "SERVING":
                break
            threading.Event().wait(0.5)
        else:
            pytest.fail(f"ingestion was not restarted: {events}")
        assert ("ingestion", "exited") in events and ("ingestion", "restarting") in events
        system.stopping.set()
        watcher.join(10)
        running = system.pids()
    assert all(not alive(pid) for pid in running.values())
    assert not healthy(processes[0]) and grpc_health(f"127.0.0.1:{ingestion}") == "UNREACHABLE"
    assert (tmp_path / "logs" / "ingestion.log").stat().st_size > 0


def test_a_process_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    bad = Process("ingestion", ("service", "ingestion", "--db", "nonsense://", "--port", str(free_port())), 1)
    with Supervisor([bad], tmp_path / "logs") as system, pytest.raises(StartFailed) as info:
        system.start()
    assert "ingestion exited" in str(info.value) and "nonsense" in str(info.value)
    assert stat.S_IMODE((tmp_path / "logs").stat().st_mode) == 0o700  # the logs are the owner's only
    assert stat.S_IMODE((tmp_path / "logs" / "ingestion.log").stat().st_mode) == 0o600


def test_a_crash_loop_is_given_up(tmp_path: Path) -> None:
    port = free_port()
    # healthy at once (tcp on a port someone else holds), then exits at once, every time
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    events: list[tuple[str, str]] = []
    flaky = Process("flaky", ("db", "upgrade", "--db", f"sqlite:///{tmp_path / 'x.db'}"), port, "tcp")
    config = SupervisorConfig(backoff=0.05, max_restarts=2, poll=0.1)
    try:
        with Supervisor([flaky], tmp_path / "logs", config) as system:
            system.start(lambda name, what, detail: events.append((name, what)))
            watcher = threading.Thread(target=system.run)
            watcher.start()
            for _ in range(100):
                if ("flaky", "gave up") in events:
                    break
                threading.Event().wait(0.1)
            system.stopping.set()
            watcher.join(10)
    finally:
        holder.close()
    assert events.count(("flaky", "restarting")) == 2 and ("flaky", "gave up") in events
