"""Children that die with their parent: a process started by `spawn` gets SIGTERM (its own clean stop) when the
process that started it dies, SIGKILL included, so no child lives on as an orphan nothing watches.

    child = spawn(["tansu", "broker", ...], stdout=log)      # subprocess.Popen's arguments

Linux's PR_SET_PDEATHSIG, set in the child between fork and exec. The kernel sends it when the *thread* that
forked the child ends, not the process: a child started from a worker thread would be stopped when that thread
finished. So every child is forked by one long-lived thread of this module (`spawner`), which ends only with
the process. Elsewhere than Linux the child is started without it. Ground floor: imports nothing of the project.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1
Job = tuple[Callable[[], Any], "Future[Any]"]


def _prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


_PRCTL = _prctl()  # looked up here, not in the forked child
_lock = threading.Lock()
_jobs: queue.SimpleQueue[Job] | None = None


def spawn(command: Sequence[str], sig: int = signal.SIGTERM, **popen: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(command, **popen)` whose process is sent `sig` when this process dies."""
    if "preexec_fn" in popen:
        raise ValueError("spawn sets preexec_fn itself")
    if _PRCTL is None:
        return subprocess.Popen(command, **popen)
    preexec = _die_with(sig, os.getpid())
    done: Future[subprocess.Popen[bytes]] = Future()
    _spawner().put((lambda: subprocess.Popen(command, preexec_fn=preexec, **popen), done))
    return done.result()


def _die_with(sig: int, parent: int) -> Callable[[], None]:
    def preexec() -> None:  # in the child, before exec: nothing that takes a lock
        _PRCTL(PR_SET_PDEATHSIG, ctypes.c_ulong(sig))
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return preexec


def _spawner() -> queue.SimpleQueue[Job]:
    global _jobs
    with _lock:
        if _jobs is None:
            _jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_jobs,), name="spawner", daemon=True).start()
        return _jobs


def _serve(jobs: queue.SimpleQueue[Job]) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # children start with no signal blocked (a thread's mask)
    while True:
        job, done = jobs.get()
        try:
            done.set_result(job())
        except BaseException as e:  # handed to the caller
            done.set_exception(e)


def _forgotten() -> None:
    """In a forked child the spawner thread does not exist: the child starts its own when it needs one."""
    global _jobs, _lock
    _jobs, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forgotten)
