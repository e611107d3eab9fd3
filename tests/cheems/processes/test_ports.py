"""Who listens on a port: the socket's holder found from /proc, own versus a stranger's, named for a message."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from cheems import processes
from cheems.processes import ports


def listener(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(family)
    s.bind((host, 0))
    s.listen()
    return s


def test_a_listening_socket_is_found_with_its_holder() -> None:
    with listener() as s:
        port = s.getsockname()[1]
        assert len(ports.listening(port)) == 1
        assert ports.holders(port) == [os.getpid()]
        assert ports.held_by(port, [os.getpid()]) and ports.listener(port, os.getpid()) == "own"
        assert ports.holder_text(port).startswith(f"port {port} is held by pid {os.getpid()} (")
        stranger = subprocess.Popen(["sleep", "60"])
        try:
            assert not ports.held_by(port, [stranger.pid]) and ports.listener(port, stranger.pid) == "other"
        finally:
            stranger.kill()
            stranger.wait(timeout=10)
    assert ports.listening(port) == set() and ports.listener(port, os.getpid()) == "none"
    assert ports.holder_text(port) == f"port {port} is free"


def test_a_connected_socket_is_no_listener() -> None:
    with listener() as server, socket.create_connection(server.getsockname()) as client:
        assert ports.listening(client.getsockname()[1]) == set()  # the client's own port only connects


def test_ipv6_listeners_count() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        s = listener(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with s:
        port = s.getsockname()[1]
        assert ports.listener(port, os.getpid()) == "own"


LISTENER = """
import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_a_child_holding_the_socket_counts_as_its_parents_tree() -> None:
    parent = subprocess.Popen(["bash", "-c", f"{sys.executable} -c '{LISTENER}'; :"], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        port = int(parent.stdout.readline())
        assert ports.listener(port, parent.pid) == "own" and parent.pid not in ports.holders(port)
    finally:
        processes.kill(processes.tree(parent.pid))
        parent.wait(timeout=10)


def test_a_free_block_skips_a_block_where_one_port_is_taken() -> None:
    whole = ports.free_block(10, 40000, 40100)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", whole + 3))
        taken.listen()
        other = ports.free_block(10, 40000, 40100)
        assert other != whole and not (other <= whole + 3 < other + 10)
    with pytest.raises(RuntimeError, match="no 10 free ports in a row"):
        ports.free_block(10, 40000, 40009)  # no whole block fits the range


def test_a_free_block_lies_below_the_ports_the_kernel_gives_outgoing_connections() -> None:
    low, high = ports.ephemeral_range()
    assert 0 < low <= high
    base = ports.free_block()
    assert base >= 10000 and base + 100 <= low
