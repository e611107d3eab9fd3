"""One `cheems up` per data directory: a second one refuses naming the first's pid; a restart after the first was
SIGKILLed stops what it left (saying so) and is healthy from its own processes only; a clean stop leaves nothing.

The supervised children are tiny Python listeners that start a `sleep` in a session of their own, as the training
service starts a training run: out of the child's process group, found by the marker every child carries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cheems import processes
from cheems.processes import ports
from cheems.processes.ports import free_port
from system.plan import Process
from system.supervisor import Supervisor, SupervisorConfig
from system.takeover import DataDirInUse, claim

CHILD = """
import pathlib, socket, subprocess, sys, time
port, record = int(sys.argv[1]), pathlib.Path(sys.argv[2])
run = subprocess.Popen(["sleep", "300"], start_new_session=True)  # like a training run: a session of its own
record.write_text(str(run.pid))
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen()
time.sleep(600)
"""
UP = """
import pathlib, sys
from system.plan import Process
from system.supervisor import Supervisor, SupervisorConfig
from system.takeover import claim
data_dir, children = pathlib.Path(sys.argv[1]), sys.argv[2:]
processes = [Process(f"child-{port}", (port, str(data_dir / port)), int(port), "tcp") for port in children]
event = lambda name, what, detail: print(name, what, detail, flush=True)
with claim(data_dir, event, 5.0) as environment:
    config = SupervisorConfig(program=(sys.executable, "-c", CHILD_CODE))
    with Supervisor(processes, data_dir / "logs", config, environment=environment) as system:
        system.start(event)
        print("ready", *(system.pids()[p.name] for p in processes), flush=True)
        system.run()
"""


def children(data_dir: Path, ports_: list[int]) -> list[Process]:
    return [Process(f"child-{p}", (str(p), str(data_dir / str(p))), p, "tcp") for p in ports_]


def config() -> SupervisorConfig:
    return SupervisorConfig(program=(sys.executable, "-c", CHILD), grace=5)


def runs(data_dir: Path, ports_: list[int]) -> list[processes.Proc]:
    """The `sleep`s the children started out of their groups."""
    found = [processes.proc(int((data_dir / str(p)).read_text())) for p in ports_]
    return [p for p in found if p is not None]


def test_a_restart_after_a_sigkill_takes_over(tmp_path: Path) -> None:
    data_dir, wanted = tmp_path / "up", [free_port(), free_port()]
    data_dir.mkdir()
    script = UP.replace("CHILD_CODE", repr(CHILD))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen([sys.executable, "-c", script, str(data_dir), *map(str, wanted)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert first.stdout is not None
    lines = [first.stdout.readline()]
    while lines[-1] and not lines[-1].startswith("ready"):  # its events, then "ready PID PID" (or its end)
        lines.append(first.stdout.readline())
    assert lines[-1].startswith("ready"), lines
    old = [p for p in (processes.proc(int(pid)) for pid in lines[-1].split()[1:]) if p is not None]
    old_runs = runs(data_dir, wanted)
    assert len(old) == len(old_runs) == 2
    os.kill(first.pid, signal.SIGKILL)
    first.wait()

    events: list[tuple[str, str, str]] = []
    with claim(data_dir, lambda *event: events.append(event), 5.0) as environment:
        stopping = [detail for name, what, detail in events if (name, what) == ("up", "stopping leftovers")]
        assert len(stopping) == 1 and all(f"pid {p.pid} (sleep 300)" in stopping[0] for p in old_runs), events
        assert not any(processes.alive(p) for p in old + old_runs)  # died with their supervisor, or stopped now
        with Supervisor(children(data_dir, wanted), data_dir / "logs", config(), environment=environment) as system:
            system.start()
            new = system.pids()
            assert not set(new.values()) & {p.pid for p in old}
            assert all(ports.listener(port, new[f"child-{port}"]) == "own" for port in wanted)
            new_runs = runs(data_dir, wanted)
            assert len(new_runs) == 2
    assert not any(processes.alive(p) for p in new_runs), "a process outlived its `cheems up`"
    assert events[-2][:2] == ("up", "stopping leftovers") and "processes left running" in events[-2][2]


def test_a_second_up_on_the_data_dir_refuses_naming_the_first(tmp_path: Path) -> None:
    data_dir = tmp_path / "up"
    data_dir.mkdir()
    with claim(data_dir, lambda *_: None, 1.0):
        in_use = rf"^{data_dir} is in use by `cheems up` pid {os.getpid()} "
        with pytest.raises(DataDirInUse, match=in_use), claim(data_dir, lambda *_: None, 1.0):
            pass
        command = [sys.executable, "-m", "cheems_cli", "up", "--data-dir", str(data_dir), "--ports-from", "20000"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith(f"error: {data_dir} is in use by `cheems up` pid {os.getpid()} ")
        assert len(result.stderr.splitlines()) == 1
    with claim(data_dir, lambda *_: None, 1.0):  # free again once the first has gone
        assert (data_dir / "up.lock").read_text() == f"{os.getpid()}\n"
