"""Process trees from /proc (Linux), so the scorer can leave no Triton process behind.

Triton's Python-backend stubs are children of `tritonserver`; when tritonserver dies hard (SIGKILL,
OOM) they lose their parent and can live on, ignoring SIGTERM. The supervisor therefore notes the
tree while tritonserver runs and kills what is left of it afterwards. A process is named by its pid
and start time, so a pid the kernel has reused for something else is never killed.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    started: int  # clock ticks after boot (field 22 of /proc/PID/stat)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] == "Z":  # a zombie is dead already; only its parent can reap it
        return None
    return int(fields[1]), int(fields[19])


def proc(pid: int) -> Proc | None:
    stat = _stat(pid)
    return Proc(pid, stat[1]) if stat else None


def tree(root: int) -> list[Proc]:
    """`root` and all its live descendants."""
    parents: dict[int, list[Proc]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents.setdefault(stat[0], []).append(Proc(int(entry.name), stat[1]))
    top = proc(root)
    found, todo = ([top] if top else []), [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def alive(p: Proc) -> bool:
    return proc(p.pid) == p


def kill(procs: list[Proc]) -> list[Proc]:
    """SIGKILL each process still alive as itself; returns those signalled."""
    killed = []
    for p in procs:
        if alive(p):
            try:
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p)
            except ProcessLookupError:
                pass
    return killed
