"""One `cheems up` per data directory, and a restart that really takes over from one that died.

    with claim(data_dir, on_event, grace) as environment:   # DataDirInUse while a live `cheems up` holds it
        Supervisor(processes, log_dir, config, stop, environment) ...

`cheems up` holds an exclusive lock (flock) on DATA_DIR/up.lock, its pid written in the file, while it runs; the
kernel releases the lock when the process dies, however it dies. Another `cheems up` on the same data directory
refuses meanwhile, naming that pid. Every child is started with CHEEMS_UP_DATA_DIR=<the data directory's real
path>, which what it starts inherits (torchrun workers, tritonserver, a vLLM engine, a training run in a session
of its own): a `cheems up` that gets the lock finds by that marker (/proc/PID/environ) the processes a dead one
left and stops them (SIGTERM, SIGKILL after `grace`), saying so as an event, before it starts its own; on its way
out it stops what its children left running the same way. Each is named by pid and start time
(`cheems.processes`), so a pid the kernel reused meanwhile is never signalled.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from cheems import processes
from cheems.errors import Conflict

MARKER = "CHEEMS_UP_DATA_DIR"
LOCK = "up.lock"
OnEvent = Callable[[str, str, str], None]  # (process name, event, detail), as the supervisor's


class DataDirInUse(Conflict):
    """Another `cheems up` runs on this data directory."""

    reason = "data_dir_in_use"


@contextlib.contextmanager
def claim(data_dir: Path, on_event: OnEvent, grace: float) -> Iterator[dict[str, str]]:
    """Hold `data_dir` for this process: lock it (DataDirInUse when held), stop what a dead `cheems up` left; yields
    the environment every child must carry. Leaving stops what the children left running."""
    with _locked(data_dir):
        environment = {MARKER: str(data_dir.resolve())}
        stop_leftovers(data_dir, on_event, grace, "a previous `cheems up` on this data directory left")
        try:
            yield environment
        finally:
            stop_leftovers(data_dir, on_event, grace, "this `cheems up`'s processes left running")


def leftovers(data_dir: Path) -> list[processes.Proc]:
    """The live processes started for a `cheems up` on `data_dir` (by their marker), this one aside."""
    return [p for p in processes.marked(MARKER, str(data_dir.resolve())) if p.pid != os.getpid()]


def stop_leftovers(data_dir: Path, on_event: OnEvent, grace: float, whose: str) -> list[processes.Proc]:
    """Stop the marked processes of `data_dir` (SIGTERM, SIGKILL after `grace` s), told to `on_event`."""
    found = leftovers(data_dir)
    if not found:
        return []
    names = ", ".join(processes.describe(p.pid) for p in found)
    on_event("up", "stopping leftovers", f"{len(found)} processes {whose}: {names}")
    stopped = processes.stop(found, grace)
    on_event("up", "stopped leftovers", f"{len(stopped)} stopped")
    return stopped


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    path = data_dir / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise DataDirInUse(
                f"{data_dir} is in use by `cheems up` pid {holder} (it holds {path}): stop it first, or use "
                "another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # the lock goes with the last descriptor of it; the kernel closes that on any death
