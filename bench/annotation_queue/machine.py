"""Where the CPU went during a run, on a machine shared with other work: the load average before and after, how
many cores were busy (all processes, from /proc/stat), and the CPU seconds of the annotators' processes and of this
one (the gRPC server, in-process). The rest of the busy time is the database's and other people's.

    before = snapshot(); ...run...; figures = usage(before, snapshot())
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any


def busy_and_total() -> tuple[int, int]:
    """Clock ticks all cores spent busy, and in all, since boot (0, 0 where /proc/stat is missing)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def cpu_seconds(who: int) -> float:
    used = resource.getrusage(who)
    return used.ru_utime + used.ru_stime


def snapshot() -> dict[str, Any]:
    return {
        "load": list(os.getloadavg()),
        "ticks": busy_and_total(),
        "server": cpu_seconds(resource.RUSAGE_SELF),
        "clients": cpu_seconds(resource.RUSAGE_CHILDREN),  # counted once they are joined
        "at": time.monotonic(),
    }


def usage(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    busy, total = (a - b for a, b in zip(after["ticks"], before["ticks"], strict=True))
    return {
        "load_before": before["load"],
        "load_after": after["load"],
        "busy_cores": round(busy / total * (os.cpu_count() or 1), 2) if total else None,
        "server_cpu_s": round(after["server"] - before["server"], 1),
        "clients_cpu_s": round(after["clients"] - before["clients"], 1),
        "seconds": round(after["at"] - before["at"], 1),
    }
