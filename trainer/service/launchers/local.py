"""The local launcher: `cheems train` as a process group on this machine (torchrun when --nproc > 1).

The run gets its own session (process group), so it outlives a restart of the training service
and is stopped as a whole (torchrun and its workers). Its handle is "<pid>:<start time>", the
start time being the kernel's (/proc/<pid>/stat field 22): a pid that was reused by another process
after a reboot or a long time does not pass for the run. Output goes to OUT/train.log, whose last
lines are a failed run's error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cheems.credentials import open_private
from trainer.report import TRAINING_ID_ENV
from trainer.service.launchers import LOG, LaunchError, LaunchSpec, Status, train_args

log = logging.getLogger(__name__)
TAIL_LINES = 20


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it does not exist or has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    if fields[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    return int(fields[19])


def parse_handle(handle: str) -> tuple[int, int]:
    pid, _, started = handle.partition(":")
    if not (pid.isdigit() and started.isdigit()):
        raise ValueError(f"not a local training handle (pid:start time): {handle!r}")
    return int(pid), int(started)


def alive(handle: str) -> bool:
    pid, started = parse_handle(handle)
    return start_time(pid) == started


def log_tail(out_dir: str | Path, lines: int = TAIL_LINES) -> str:
    path = Path(out_dir) / LOG
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.rstrip().splitlines()[-lines:])


class LocalLauncher:
    kind = "local"

    def __init__(self, python: str = sys.executable, grace: float = 10.0) -> None:
        self.python, self.grace = python, grace  # grace: seconds between SIGTERM and SIGKILL on stop
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # runs this instance started: exit codes known

    def start(self, spec: LaunchSpec) -> str:
        out = Path(spec.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        command = [self.python, "-m", "cheems_cli", *train_args(spec)]
        try:
            with open_private(out / LOG) as output:  # 0600
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, TRAINING_ID_ENV: spec.training_id},  # on every line the run logs
                )
        except OSError as e:
            raise LaunchError(f"cannot start {command[0]}: {e}") from None
        started = start_time(process.pid)
        if started is None:  # exited at once: its exit status tells why
            process.wait()
            started = 0
        handle = f"{process.pid}:{started}"
        self.children[handle] = process
        log.info("training %s: started process group %d (%s)", spec.training_id, process.pid, " ".join(command))
        return handle

    def status(self, handle: str, out_dir: str) -> Status:
        process = self.children.get(handle)
        if process is None:
            return Status("running") if alive(handle) else Status("gone")
        code = process.poll()
        if code is None:
            return Status("running")
        del self.children[handle]
        if code == 0:
            return Status("succeeded")
        return Status("failed", f"cheems train exited with status {code}:\n{log_tail(out_dir)}")

    def stop(self, handle: str) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; returns once it is gone."""
        pid, _ = parse_handle(handle)
        if not alive(handle):
            self._reap(handle)
            self.children.pop(handle, None)
            return
        self._signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while alive(handle) and time.monotonic() < deadline:
            self._reap(handle, timeout=0.1)
            time.sleep(0.1)
        if alive(handle):
            self._signal(pid, signal.SIGKILL)
        self._reap(handle, timeout=self.grace)
        self.children.pop(handle, None)

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)

    def _reap(self, handle: str, timeout: float = 0.001) -> None:
        """Collect the exit status of a run this instance started (a zombie until then)."""
        process = self.children.get(handle)
        if process is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
