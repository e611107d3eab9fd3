"""Run a plan's processes as supervised children: started in order once each is healthy, a log file each,
a crashed one restarted (with backoff, a bounded number of times), all stopped on SIGTERM or Ctrl-C.

    with Supervisor(plan(config), log_dir, SupervisorConfig()) as system:
        system.start(on_event=print)      # blocks until every process is healthy (or raises)
        system.run()                      # watches and restarts until system.stopping is set
    # leaving the block stops every child: SIGTERM, then SIGKILL after `grace` seconds

Each child is `python -m cheems_cli ARGS` in a process group of its own, so stopping it stops what it
started (torchrun workers, tritonserver); a child that exits has what is left of its group killed before it is
restarted, so a service is never half alive. Children die with the supervisor (SIGTERM: they stop what they
started), SIGKILL included (`cheems.processes.parent`), and carry `environment` (`cheems up` marks its tree so
that the next one finds what a dead one left: `system.takeover`). Only what this supervisor started counts: a
child's port must be free before it starts (StartFailed naming the holder), and a child is healthy only while
it is alive and the socket listening on its port is its own (its process tree's), never a stranger's.
Events ("started", "healthy", "exited", "port held", "restarting", "gave up", "stopped") go to `on_event` with
the process name: the CLI prints them as a timeline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client import CollectorRegistry, Counter

from cheems import processes
from cheems.credentials import open_private, private_folder
from cheems.errors import Unavailable
from cheems.processes import ports
from cheems.processes.parent import spawn
from services.observe.metrics import new_registry
from system.plan import Process

log = logging.getLogger(__name__)
OnEvent = Callable[[str, str, str], None]  # (process name, event, detail)


class StartFailed(Unavailable):
    """A process did not become healthy (or a one-off step failed): the system cannot come up."""

    reason = "start_failed"


@dataclass(frozen=True)
class SupervisorConfig:
    """grace: seconds a child gets to stop after SIGTERM; max_restarts: restarts of one process within
    `window` seconds before the supervisor gives up on it; backoff: first pause before a restart, doubled;
    program: the command a process's `args` follow."""

    grace: float = 15.0
    max_restarts: int = 5
    window: float = 300.0
    backoff: float = 1.0
    poll: float = 0.5
    program: tuple[str, ...] = (sys.executable, "-m", "cheems_cli")


@dataclass
class Child:
    process: Process
    popen: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    restarts: list[float] = field(default_factory=list)  # when it was restarted, for the window
    gave_up: bool = False
    left: int = 0  # processes of its group it left behind when it last exited (killed)


class Supervisor:
    def __init__(
        self,
        processes: Sequence[Process],
        log_dir: Path,
        config: SupervisorConfig | None = None,
        stop: threading.Event | None = None,
        environment: Mapping[str, str] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`environment`: variables every child gets (and what it starts, unless that replaces its environment);
        `registry`: where the restarts are counted (`cheems_up_restarts_total{process}`)."""
        self.children = [Child(p) for p in processes]
        self.restarts = Counter(
            "cheems_up_restarts", "Restarts of a supervised process after it exited", ["process"],
            registry=registry if registry is not None else new_registry(),
        )  # fmt: skip
        for child in self.children:
            if not child.process.once:
                self.restarts.labels(child.process.name)  # shown from the start, at 0
        self.environment = dict(environment or {})
        self.stopping = stop or threading.Event()  # set: starting gives up, watching ends
        self.log_dir, self.config = private_folder(Path(log_dir)), config or SupervisorConfig()  # 0700, logs 0600
        self.on_event: OnEvent = lambda name, event, detail: None

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, on_event: OnEvent | None = None) -> None:
        """Start every process in order, each once the ones before it are healthy; StartFailed otherwise."""
        if on_event is not None:
            self.on_event = on_event
        for child in self.children:
            if self._port_held(child):
                raise StartFailed(f"{child.process.name} cannot start: {ports.holder_text(child.process.port)}")
            self._spawn(child)
            if child.process.once:
                self._wait_once(child)
            else:
                self._wait_healthy(child)

    def run(self) -> None:
        """Watch the children until `stopping` is set: a child that exits is restarted, within the limits."""
        while not self.stopping.wait(self.config.poll):
            for child in self.children:
                if child.process.once or child.gave_up or child.popen is None:
                    continue
                code = self._exited(child)
                if code is not None:
                    self._restart(child, code)

    def stop(self) -> None:
        """Stop every child, last started first: SIGTERM to its group, SIGKILL after `grace` seconds."""
        for child in reversed(self.children):
            popen = child.popen
            if popen is not None and popen.poll() is None:
                _signal_group(popen, signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace
        for child in reversed(self.children):
            popen = child.popen
            if popen is None:
                continue
            try:
                popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(popen, signal.SIGKILL)
                popen.wait()
            _signal_group(popen, signal.SIGKILL)  # what the child left behind in its group
            if child.log_file is not None:
                child.log_file.close()
                child.log_file = None
            if not child.process.once:
                self.on_event(child.process.name, "stopped", f"exit {popen.returncode}")
            child.popen = None

    def pids(self) -> dict[str, int]:
        return {c.process.name: c.popen.pid for c in self.children if c.popen is not None and c.popen.poll() is None}

    # --- one child ---------------------------------------------------------------------------

    def _spawn(self, child: Child) -> None:
        if child.log_file is None:
            child.log_file = open_private(self.log_path(child.process.name))  # kept open while it runs
        command = [*self.config.program, *child.process.args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.environment}
        child.popen = spawn(  # SIGTERM when the supervisor dies
            command, stdout=child.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        where = f" on :{child.process.port}" if child.process.port else ""
        self.on_event(child.process.name, "started", f"pid {child.popen.pid}{where}")

    def _wait_once(self, child: Child) -> None:
        assert child.popen is not None
        try:
            code = child.popen.wait(child.process.start_timeout)
        except subprocess.TimeoutExpired:
            raise StartFailed(f"{child.process.name} did not finish in {child.process.start_timeout:.0f} s") from None
        if code != 0:
            raise StartFailed(f"{child.process.name} failed (exit {code}): {self._tail(child)}")
        self.on_event(child.process.name, "done", "exit 0")

    def _wait_healthy(self, child: Child) -> None:
        assert child.popen is not None
        deadline = time.monotonic() + child.process.start_timeout
        while time.monotonic() < deadline:
            if self.stopping.is_set():
                raise StartFailed(f"stopped while {child.process.name} was starting")
            if child.popen.poll() is not None:
                raise StartFailed(f"{child.process.name} exited ({child.popen.returncode}): {self._tail(child)}")
            if self._own_port(child) and healthy(child.process):
                self.on_event(child.process.name, "healthy", "")
                return
            time.sleep(self.config.poll)
        raise StartFailed(f"{child.process.name} not healthy after {child.process.start_timeout:.0f} s")

    def _own_port(self, child: Child) -> bool:
        """Whether the socket listening on the child's port is its own; StartFailed when a stranger's is."""
        if not child.process.port or child.process.health == "none" or child.popen is None:
            return True
        who = ports.listener(child.process.port, child.popen.pid)
        if who == "other":
            holder = ports.holder_text(child.process.port)
            raise StartFailed(f"{child.process.name} (pid {child.popen.pid}) is not what answers: {holder}")
        return who == "own"

    def _port_held(self, child: Child) -> bool:
        return bool(child.process.port) and not child.process.once and bool(ports.listening(child.process.port))

    def _exited(self, child: Child) -> int | None:
        """The child's exit status once it has exited, what was left of its process group killed first."""
        popen = child.popen
        assert popen is not None
        if popen.returncode is None:
            try:  # exited? (not reaped yet: while its zombie stands, its pid, the group's id, is not reused)
                if os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                    return None
            except ChildProcessError:  # reaped meanwhile (`pids` polls)
                pass
        left = processes.group(popen.pid)
        if popen.returncode is None:
            _signal_group(popen, signal.SIGKILL)
        else:
            processes.kill(left)
        child.left = len(left)
        processes.gone_by(left, self.config.grace)
        return popen.wait()

    def _restart(self, child: Child, code: int) -> None:
        name = child.process.name
        left = f"; killed {child.left} processes it left in its group" if child.left else ""
        self.on_event(name, "exited", f"exit {code}{left}; log {self.log_path(name)}")
        while True:
            now = time.monotonic()
            child.restarts = [t for t in child.restarts if now - t < self.config.window]
            if len(child.restarts) >= self.config.max_restarts:
                child.gave_up = True
                self.on_event(name, "gave up", f"{len(child.restarts)} restarts in {self.config.window:.0f} s")
                return
            pause = self.config.backoff * 2 ** len(child.restarts)
            self.on_event(name, "restarting", f"in {pause:.0f} s")
            if self.stopping.wait(pause):
                return
            child.restarts.append(time.monotonic())
            self.restarts.labels(name).inc()
            if not self._port_held(child):
                self._spawn(child)
                return
            self.on_event(name, "port held", ports.holder_text(child.process.port))

    def _tail(self, child: Child, lines: int = 5) -> str:
        if child.log_file is not None:
            child.log_file.flush()
        try:
            text = self.log_path(child.process.name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])


def healthy(process: Process, timeout: float = 2.0) -> bool:
    """Whether the process answers: a TCP connect, or gRPC health SERVING on its port."""
    if process.health == "none":
        return True
    if process.health == "tcp":
        try:
            with socket.create_connection(("127.0.0.1", process.port), timeout=timeout):
                return True
        except OSError:
            return False
    return grpc_health(f"127.0.0.1:{process.port}", timeout) == "SERVING"


def grpc_health(address: str, timeout: float = 2.0, service: str = "") -> str:
    """SERVING, NOT_SERVING, ... as the server says, or UNREACHABLE."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
    except grpc.RpcError:
        return "UNREACHABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def _signal_group(popen: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, sig)
