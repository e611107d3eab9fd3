"""Children that die with their parent: SIGTERM when the parent is SIGKILLed, never when the thread that asked for
them ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cheems import processes
from cheems.processes.parent import spawn

MIDDLE = """
import sys, time
from cheems.processes.parent import spawn
child = spawn(["sleep", "60"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_child_gets_sigterm_when_its_parent_is_killed() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE], stdout=subprocess.PIPE, env=env)
    try:
        assert middle.stdout is not None
        child = processes.proc(int(middle.stdout.readline()))
        assert child is not None and processes.alive(child)
        os.kill(middle.pid, signal.SIGKILL)
        middle.wait(timeout=10)
        assert processes.gone_by([child], 30), "the child outlived its SIGKILLed parent"
    finally:
        middle.kill()
        middle.wait(timeout=10)


def test_a_child_outlives_the_thread_that_started_it() -> None:
    started: list[subprocess.Popen[bytes]] = []
    thread = threading.Thread(target=lambda: started.append(spawn(["sleep", "60"])))
    thread.start()
    thread.join()
    try:
        time.sleep(0.3)  # PR_SET_PDEATHSIG would have fired when the thread ended
        assert started[0].poll() is None
    finally:
        started[0].kill()
        started[0].wait(timeout=10)


def test_spawn_sets_its_own_preexec() -> None:
    with pytest.raises(ValueError, match="preexec_fn"):
        spawn(["true"], preexec_fn=lambda: None)
