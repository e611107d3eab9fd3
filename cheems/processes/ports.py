"""Who listens on a TCP port (Linux): the listening sockets from /proc/net/tcp and tcp6, their holders from
/proc/PID/fd.

    listening(9092)            # the inodes of the sockets listening on port 9092, any address
    holders(9092)              # the pids holding one of them open (those this user may inspect)
    held_by(9092, {pid, ...})  # whether one of these processes holds one (a start checks its own child's tree)
    listener(9092, pid)        # "own" (pid or a descendant listens), "other" or "none": health on its own port
    holder_text(9092)          # "port 9092 is held by pid 123 (tansu broker ...)", for an error message
    free_port()                # a port nothing listens on now (127.0.0.1)
    free_block(100)            # the first of 100 such ports in a row, below the ephemeral range (`--ports-from`)

A port counts as held when anything listens on it on any address: a check before a start is on the safe side.
Sockets of other network namespaces are not seen. Ground floor: imports nothing of the project but `processes`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

from cheems.processes import PROC, describe, tree

LISTEN = "0A"  # the state column of /proc/net/tcp


def listening(port: int) -> set[int]:
    """The inodes of the TCP sockets listening on `port`, IPv4 and IPv6, any local address."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:  # no IPv6 here
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def _holding(pids: Iterable[int], inodes: set[int]) -> list[int]:
    links = {f"socket:[{inode}]" for inode in inodes}
    found = []
    for pid in pids:
        try:
            fds = list((PROC / str(pid) / "fd").iterdir())
        except OSError:  # another user's, or gone
            continue
        for fd in fds:
            try:
                if str(fd.readlink()) in links:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def holders(port: int) -> list[int]:
    """The pids of the processes holding a socket listening on `port` (those this user may inspect)."""
    inodes = listening(port)
    if not inodes:
        return []
    return _holding(sorted(int(e.name) for e in PROC.iterdir() if e.name.isdigit()), inodes)


def held_by(port: int, pids: Iterable[int]) -> bool:
    """Whether one of `pids` holds a socket listening on `port`."""
    inodes = listening(port)
    return bool(inodes) and bool(_holding(pids, inodes))


def holder_text(port: int) -> str:
    """Who holds `port`, for a message: "port 9092 is held by pid 123 (...)"; "port 9092 is free" when none."""
    if not listening(port):
        return f"port {port} is free"
    pids = holders(port)
    if not pids:
        return f"port {port} is held by a process this user cannot see (another user's?)"
    return f"port {port} is held by {', '.join(describe(pid) for pid in pids)}"


def listener(port: int, root: int) -> str:
    """Who listens on `port`: "own" (`root` or a process it started), "other" (another process), or "none"."""
    for _ in range(2):  # a listener seen after the tree was read may be the tree's own, bound meanwhile
        if held_by(port, [p.pid for p in tree(root)]):
            return "own"
        if not listening(port):
            return "none"
    return "other"


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel picks a connection's local port from (Linux: ip_local_port_range; 32768-60999)."""
    try:
        low, high = (PROC / "sys" / "net" / "ipv4" / "ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_block(size: int = 100, first: int = 10000, last: int | None = None) -> int:
    """The first port of `size` free ports of 127.0.0.1 in a row, in [first, last): blocks scanned from one chosen by
    this process's pid, wrapping around, so that processes looking at once (tests on parallel workers, two systems
    started together) start apart. A block free now can still be taken before it is bound, by a process that does
    not look; two that look collide only where both pids pick the same block and it is the first free.

    `last` defaults to the start of the kernel's ephemeral range: a port in it can be taken, between the look and
    the bind, as the local port of any process's outgoing connection (a Kafka client's, say), which no look
    prevents (seen: a system's metrics port lost to one, "Address already in use")."""
    if last is None:
        last = ephemeral_range()[0]
    blocks = list(range(first, last - size + 1, size))
    start = os.getpid() % len(blocks) if blocks else 0
    for base in blocks[start:] + blocks[:start]:
        held: list[socket.socket] = []
        try:
            for port in range(base, base + size):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {size} free ports in a row on 127.0.0.1")
