"""The supervisor with real `cheems` processes (and tiny Python ones): started in order once healthy, a crashed one
restarted with what was left of its group killed first, a failing start reported with its log, a port someone else
holds refused, and nothing left running after stop."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cheems import processes
from cheems.processes import ports
from cheems.processes.ports import free_port
from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.client import EventConsumer, Publisher
from system.plan import Process
from system.supervisor import StartFailed, Supervisor, SupervisorConfig, grpc_health, healthy
from tests.services.bus.test_broker import announced


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


CRASH = """
import pathlib, socket, sys
port, crashed = int(sys.argv[1]), pathlib.Path(sys.argv[2])
if crashed.exists():
    sys.exit(1)
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen()
s.accept()  # the supervisor's health check; then crash, and crash again at every restart
crashed.touch()
sys.exit(1)
"""


def test_a_crash_loop_is_given_up(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    port = free_port()
    flaky = Process("flaky", (str(port), str(tmp_path / "crashed")), port, "tcp")
    config = SupervisorConfig(backoff=0.05, max_restarts=2, poll=0.1, program=(sys.executable, "-c", CRASH))
    with Supervisor([flaky], tmp_path / "logs", config) as system:
        system.start(lambda name, what, detail: events.append((name, what)))
        watcher = threading.Thread(target=system.run)
        watcher.start()
        for _ in range(300):
            if ("flaky", "gave up") in events:
                break
            threading.Event().wait(0.1)
        system.stopping.set()
        watcher.join(10)
    assert events.count(("flaky", "restarting")) == 2 and ("flaky", "gave up") in events


def test_a_held_port_fails_the_start_naming_the_holder(tmp_path: Path) -> None:
    """A stranger answering on the port never passes for the process: nothing starts, the holder is named."""
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        events: list[tuple[str, str]] = []
        broker = Process("broker", ("dev", "broker", "--port", str(port)), port, "tcp")
        with Supervisor([broker], tmp_path / "logs") as system, pytest.raises(StartFailed) as info:
            system.start(lambda name, what, detail: events.append((name, what)))
    assert str(info.value).startswith(f"broker cannot start: port {port} is held by pid {os.getpid()} (")
    assert events == []


def test_a_broker_whose_broker_process_dies_is_restarted_and_serves(tmp_path: Path) -> None:
    port = free_port()
    broker = Process("broker", ("dev", "broker", "--port", str(port), "--partitions", "1"), port, "tcp")
    events: list[tuple[str, str]] = []
    with Supervisor([broker], tmp_path / "logs", SupervisorConfig(backoff=0.2, grace=10)) as system:
        system.start(lambda name, what, detail: events.append((name, what)))
        wrapper = system.pids()["broker"]
        watcher = threading.Thread(target=system.run)
        watcher.start()
        try:
            log = system.log_path("broker")
            assert wait_for(lambda: len(announced(log.read_text())) == 1), log.read_text()  # its topics made: it waits
            (tansu,) = processes.tree(wrapper)[1:]
            os.kill(tansu.pid, signal.SIGKILL)
            assert wait_for(lambda: system.pids().get("broker", wrapper) != wrapper), events
            assert wait_for(lambda: ports.listener(port, system.pids().get("broker", 0)) == "own"), events
            assert wait_for(lambda: len(announced(log.read_text())) == 2), log.read_text()  # its topics again
            after = events[events.index(("broker", "exited")) :]  # a port still held by the dead one: a retry
            assert after[:2] == [("broker", "exited"), ("broker", "restarting")] and after[-1] == ("broker", "started")
            assert round_trip(f"127.0.0.1:{port}") == [("p1", "你好")]
        finally:
            system.stopping.set()
            watcher.join(10)


GROUP = """
import pathlib, socket, subprocess, sys
port, pids = int(sys.argv[1]), pathlib.Path(sys.argv[2])
needed, other = subprocess.Popen(["sleep", "300"]), subprocess.Popen(["sleep", "300"])
pids.write_text(f"{needed.pid} {other.pid}")
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen()
needed.wait()  # what it needs died: it exits, to be restarted, and leaves `other` behind in its group
sys.exit(1)
"""


def test_a_child_whose_grandchild_dies_is_restarted_as_a_whole(tmp_path: Path) -> None:
    port, pids = free_port(), tmp_path / "pids"
    service = Process("service", (str(port), str(pids)), port, "tcp")
    config = SupervisorConfig(backoff=0.1, poll=0.1, program=(sys.executable, "-c", GROUP))
    events: list[tuple[str, str, str]] = []
    with Supervisor([service], tmp_path / "logs", config) as system:
        system.start(lambda name, what, detail: events.append((name, what, detail)))
        first = system.pids()["service"]
        needed, other = (processes.proc(int(pid)) for pid in pids.read_text().split())
        assert needed is not None and other is not None
        watcher = threading.Thread(target=system.run)
        watcher.start()
        try:
            os.kill(needed.pid, signal.SIGKILL)
            assert wait_for(lambda: system.pids().get("service", first) != first), events
            assert not processes.alive(other), "a process of the old group outlived the restart"
            exited = [detail for _, what, detail in events if what == "exited"]
            assert exited[0].startswith("exit 1; killed 1 processes it left in its group;")
            assert wait_for(lambda: ports.listener(port, system.pids().get("service", 0)) == "own")
        finally:
            system.stopping.set()
            watcher.join(10)
            processes.kill([other])


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def round_trip(bootstrap: str) -> list[tuple[str, str]]:
    """What a consumer reads back of one sample published to `bootstrap`."""
    sample = common_pb2.Sample(prompt_id="p1", prompt="你好", responses=[common_pb2.Response(id="r", content="好")])
    publisher = Publisher(bootstrap)
    publisher.publish(topics.SAMPLES, "p1", events_pb2.SampleEvent(sample=sample)).get(timeout=60)  # acknowledged
    publisher.close()
    seen: list[tuple[str, str]] = []
    consumer = EventConsumer(
        bootstrap, [topics.SAMPLES], "supervisor-test", lambda _, key, event: seen.append((key, event.sample.prompt))
    )
    deadline = time.monotonic() + 120  # a group join on a loaded machine takes its time
    while not seen and time.monotonic() < deadline:
        consumer.poll_once()
    consumer.close()
    return seen
