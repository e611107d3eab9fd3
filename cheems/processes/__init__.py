"""Process trees from /proc (Linux): who a process is, what it started, and stopping what is left of it.

    procs = tree(pid)                     # pid and its live descendants, each named by pid and start time
    stop(procs, grace=10)                 # SIGTERM, SIGKILL after `grace` s to those still alive as themselves
    group(pgid), marked("CHEEMS_UP_DATA_DIR", "/data")   # a process group; processes by an environment marker

A process is named by its pid and start time (`Proc`), so a pid the kernel has reused for something else is
never signalled. Uses: the scorer kills what is left of a crashed tritonserver (its Python-backend stubs ignore
SIGTERM once orphaned), the supervisor stops a child's group and finds a dead `cheems up`'s processes by their
marker. `ports` says who listens on a port; `parent` starts children that die with their parent.
Ground floor: imports nothing of the project.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    started: int  # clock ticks after boot (field 22 of /proc/PID/stat)


@dataclass(frozen=True)
class _Stat:
    parent: int
    group: int
    started: int


def _stat(pid: int) -> _Stat | None:
    """A live process's parent, process group and start time, or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):  # a zombie is dead already; only its parent can reap it
        return None
    return _Stat(int(fields[1]), int(fields[2]), int(fields[19]))


def _live() -> dict[int, _Stat]:
    found = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def proc(pid: int) -> Proc | None:
    stat = _stat(pid)
    return Proc(pid, stat.started) if stat else None


def tree(root: int) -> list[Proc]:
    """`root` and all its live descendants."""
    children: dict[int, list[Proc]] = {}
    for pid, stat in _live().items():
        children.setdefault(stat.parent, []).append(Proc(pid, stat.started))
    top = proc(root)
    found, todo = ([top] if top else []), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def children(pid: int) -> list[Proc]:
    """The live processes `pid` started itself (not their descendants)."""
    return [Proc(child, stat.started) for child, stat in _live().items() if stat.parent == pid]


def command(pid: int) -> list[str]:
    """The process's command line, word by word ([] when it cannot be read: gone, or another user's)."""
    try:
        words = (PROC / str(pid) / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return []
    return [w.decode(errors="replace") for w in words if w]


def group(pgid: int) -> list[Proc]:
    """The live members of process group `pgid` (its leader may be gone: the group lives while any member does)."""
    return [Proc(pid, stat.started) for pid, stat in _live().items() if stat.group == pgid]


def marked(name: str, value: str) -> list[Proc]:
    """Live processes whose environment, as they were started, holds `name=value` (inherited by what they start,
    unless they replaced it). Only processes this user may inspect are seen."""
    wanted = f"{name}={value}".encode()
    found = []
    for pid, stat in _live().items():
        try:
            environment = (PROC / str(pid) / "environ").read_bytes()
        except OSError:  # another user's, or gone
            continue
        if wanted in environment.split(b"\0"):
            found.append(Proc(pid, stat.started))
    return found


def describe(pid: int) -> str:
    """The pid and its command line, as far as it can be read: `pid 123 (python -m cheems_cli dev broker)`."""
    text = command(pid)
    if not text:
        return f"pid {pid}"
    line = " ".join([Path(text[0]).name, *text[1:]]) if text else ""
    line = line if len(line) <= 100 else line[:99] + "…"
    return f"pid {pid} ({line})" if line else f"pid {pid}"


def alive(p: Proc) -> bool:
    return proc(p.pid) == p


def kill(procs: Iterable[Proc], sig: int = signal.SIGKILL) -> list[Proc]:
    """Send `sig` (SIGKILL) to each process still alive as itself; returns those signalled."""
    signalled = []
    for p in procs:
        if alive(p):
            try:
                os.kill(p.pid, sig)
                signalled.append(p)
            except ProcessLookupError:
                pass
    return signalled


def stop(procs: Iterable[Proc], grace: float) -> list[Proc]:
    """SIGTERM each process still alive as itself, SIGKILL those alive after `grace` seconds, and wait (a few
    seconds at most) until they are gone; returns those signalled."""
    signalled = kill(procs, signal.SIGTERM)
    gone_by(signalled, grace)
    kill(signalled)
    gone_by(signalled, 5.0)
    return signalled


def gone_by(procs: Iterable[Proc], timeout: float) -> bool:
    """Wait up to `timeout` seconds until none of `procs` is alive (zombies count as gone); whether they are."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in procs):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
