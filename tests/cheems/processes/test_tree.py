"""Process trees from /proc: find a tree, a group, processes by their environment marker; kill the orphans of a killed
parent, stop what ignores SIGTERM, and never signal a reused pid."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cheems import processes
from cheems.processes import Proc


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def bash_tree() -> Iterator[subprocess.Popen[bytes]]:
    """bash with two `sleep 60` children; whatever is left afterwards is killed and reaped."""
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & wait"])
    seen: list[Proc] = []
    try:
        wait_until(lambda: len(processes.tree(parent.pid)) == 3)
        seen = processes.tree(parent.pid)
        yield parent
    finally:
        seen += processes.tree(parent.pid)
        parent.kill()
        parent.wait(timeout=10)
        for p in seen:
            if processes.alive(p):
                os.kill(p.pid, signal.SIGKILL)


def test_tree_finds_the_parent_and_its_children(bash_tree: subprocess.Popen[bytes]) -> None:
    found = processes.tree(bash_tree.pid)
    assert len(found) == 3 and found[0].pid == bash_tree.pid
    children = found[1:]
    for child in children:
        assert (processes.PROC / str(child.pid) / "cmdline").read_bytes().split(b"\0")[0] == b"sleep"
        assert processes.alive(child)
    assert processes.proc(bash_tree.pid) == found[0]


def test_kill_takes_the_orphans_of_a_killed_parent(bash_tree: subprocess.Popen[bytes]) -> None:
    seen = processes.tree(bash_tree.pid)
    children = seen[1:]
    os.kill(bash_tree.pid, signal.SIGKILL)
    bash_tree.wait(timeout=10)  # reap the parent: the sleeps are orphans now, reparented away from it
    assert not processes.alive(seen[0]) and processes.tree(bash_tree.pid) == []
    assert all(processes.alive(c) for c in children)
    killed = processes.kill(seen)
    assert sorted(killed, key=lambda p: p.pid) == sorted(children, key=lambda p: p.pid)
    # the orphans' new parent (init or a subreaper) reaps them; until then they are zombies, which count as dead
    wait_until(lambda: not any(processes.alive(c) for c in children))
    assert processes.kill(seen) == []  # nothing left to signal


def test_a_reused_pid_is_never_killed(bash_tree: subprocess.Popen[bytes]) -> None:
    _, first, second = processes.tree(bash_tree.pid)
    impostor = Proc(first.pid, first.started + 1)  # same pid, other start time: some other process
    assert processes.proc(first.pid) == first and not processes.alive(impostor)
    assert processes.kill([impostor]) == []
    assert processes.alive(first)
    assert processes.kill([Proc(second.pid, second.started)]) == [second]


def test_a_missing_pid_is_not_alive() -> None:
    done = subprocess.Popen(["true"])
    done.wait(timeout=10)
    assert processes.proc(done.pid) is None and processes.tree(done.pid) == []
    assert processes.kill([Proc(done.pid, 1)]) == []


def test_a_zombie_counts_as_dead() -> None:
    child = subprocess.Popen(["true"])
    try:
        wait_until(lambda: (processes.PROC / str(child.pid) / "stat").read_text().split(") ")[1][0] == "Z")
        assert processes.proc(child.pid) is None
    finally:
        child.wait(timeout=10)


def test_a_command_name_with_spaces_and_parentheses_parses() -> None:
    # the kernel's command name (comm) is what /proc/PID/stat shows in parentheses; a process may set it
    child = subprocess.Popen(["bash", "-c", "printf 'odd) (x y' > /proc/$$/comm; sleep 60; :"])
    try:
        wait_until(lambda: "odd" in (processes.PROC / str(child.pid) / "stat").read_text())
        assert "(odd) (x y)" in (processes.PROC / str(child.pid) / "stat").read_text()
        p = processes.proc(child.pid)
        assert p is not None and p.pid == child.pid and processes.alive(p)
        wait_until(lambda: len(processes.tree(child.pid)) == 2)  # and its `sleep` child is found under it
    finally:
        processes.kill(processes.tree(child.pid))
        child.wait(timeout=10)


def test_a_group_and_a_marker_find_what_a_process_started(tmp_path: Path) -> None:
    """The group holds the process and its children; the marker, inherited, finds them in a session of their own."""
    marker = f"CHEEMS_TEST_MARKER={tmp_path}"
    script = "sleep 60 & setsid sleep 60 & wait"
    parent = subprocess.Popen(["bash", "-c", script], env={**os.environ, "CHEEMS_TEST_MARKER": str(tmp_path)},
                              start_new_session=True)  # fmt: skip
    try:
        wait_until(lambda: len(processes.tree(parent.pid)) == 3)
        everyone = processes.tree(parent.pid)
        name, value = marker.split("=", 1)
        assert sorted(processes.marked(name, value), key=lambda p: p.pid) == sorted(everyone, key=lambda p: p.pid)
        assert processes.marked(name, value + "-other") == []
        in_group = processes.group(parent.pid)
        assert parent.pid in {p.pid for p in in_group} and len(in_group) == 2  # setsid's sleep left the group
        assert processes.describe(parent.pid) == f"pid {parent.pid} (bash -c {script})"
    finally:
        processes.kill(processes.tree(parent.pid))
        parent.wait(timeout=10)


def test_stop_terms_then_kills_what_ignores_sigterm() -> None:
    polite = subprocess.Popen(["sleep", "60"])
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; echo ready; exec sleep 60"], stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        targets = [p for p in (processes.proc(polite.pid), processes.proc(stubborn.pid)) if p is not None]
        assert processes.stop(targets, grace=0.5) == targets
        assert polite.wait(timeout=10) == -signal.SIGTERM and stubborn.wait(timeout=10) == -signal.SIGKILL
        assert processes.stop(targets, grace=0.5) == []  # gone: nothing signalled again
    finally:
        for child in (polite, stubborn):
            child.kill()
            child.wait(timeout=10)
