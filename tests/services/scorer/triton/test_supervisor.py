"""Supervisor: readiness follows the backend, a dead backend is restarted, exhausted restarts FAIL. Fakes only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from services.scorer.triton.supervisor import RestartPolicy, State, Supervisor

FAST = RestartPolicy(attempts=2, first_pause=0.01)


class Published:
    """A `publish` callable recording every (state, why) it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[State, str]] = []

    def __call__(self, state: State, why: str) -> None:
        self.calls.append((state, why))

    @property
    def states(self) -> list[State]:
        return [s for s, _ in self.calls]


class Backend:
    """A fake backend: `up` says whether it serves; `restart` brings it up after `fail_restarts` failures."""

    def __init__(self, up: bool, fail_restarts: int = 0, raises: bool = False) -> None:
        self.up, self.fail_restarts, self.raises = up, fail_restarts, raises
        self.restarts = 0

    def ready(self) -> bool:
        return self.up

    def restart(self) -> None:
        self.restarts += 1
        if self.restarts <= self.fail_restarts:
            if self.raises:
                raise RuntimeError("tritonserver would not start")
            return  # "started", but never becomes ready
        self.up = True


def supervisor(backend: Backend, published: Published, **kw: object) -> Supervisor:
    return Supervisor(backend.ready, published, **kw)  # type: ignore[arg-type]


def test_ready_publishes_serving_once() -> None:
    published = Published()
    s = supervisor(Backend(up=True), published)
    assert [s.step(), s.step(), s.step()] == [State.SERVING] * 3
    assert published.states == [State.SERVING] and s.state is State.SERVING and s.restarts == 0


def test_not_ready_without_restart_is_down_once() -> None:
    published, backend = Published(), Backend(up=False)
    s = supervisor(backend, published)
    assert [s.step(), s.step()] == [State.DOWN, State.DOWN]
    assert published.states == [State.DOWN]
    backend.up = True  # readiness returns on its own (an external Triton came back)
    assert s.step() is State.SERVING
    assert published.states == [State.DOWN, State.SERVING]


def test_a_serving_backend_missing_one_check_stays_serving() -> None:
    published, backend = Published(), Backend(up=True)
    s = supervisor(backend, published, dead=lambda: False, down_after=2)
    assert s.step() is State.SERVING
    backend.up = False  # one slow answer
    assert s.step() is State.SERVING
    backend.up = True
    assert s.step() is State.SERVING
    backend.up = False  # two in a row: down
    assert [s.step(), s.step()] == [State.SERVING, State.DOWN]
    assert published.states == [State.SERVING, State.DOWN]


def test_busy_but_not_dead_is_down_and_not_restarted() -> None:
    published, backend = Published(), Backend(up=False)
    s = supervisor(backend, published, restart=backend.restart, dead=lambda: False, policy=FAST)
    assert s.step() is State.DOWN
    assert backend.restarts == 0 and published.states == [State.DOWN]


def test_dead_backend_is_restarted_and_serves_again() -> None:
    published, backend = Published(), Backend(up=True)
    s = supervisor(backend, published, restart=backend.restart, dead=lambda: not backend.up, policy=FAST)
    assert s.step() is State.SERVING
    backend.up = False  # it crashed
    assert s.step() is State.SERVING
    assert backend.restarts == 1 and s.restarts == 1
    assert published.states == [State.SERVING, State.DOWN, State.SERVING]
    assert "attempt 1/2" in published.calls[1][1] and "restart 1" in published.calls[2][1]


def test_second_attempt_succeeds_after_a_raising_restart() -> None:
    published, backend = Published(), Backend(up=False, fail_restarts=1, raises=True)
    s = supervisor(backend, published, restart=backend.restart, policy=FAST)
    assert s.step() is State.SERVING
    assert backend.restarts == 2 and s.restarts == 1
    assert published.states == [State.DOWN, State.DOWN, State.SERVING]


@pytest.mark.parametrize("raises", [True, False], ids=["restart-raises", "never-ready"])
def test_exhausted_restarts_fail(raises: bool) -> None:
    published, backend = Published(), Backend(up=False, fail_restarts=99, raises=raises)
    s = supervisor(backend, published, restart=backend.restart, policy=FAST)
    assert s.step() is State.FAILED
    assert backend.restarts == FAST.attempts and s.restarts == 0
    assert published.states == [State.DOWN, State.DOWN, State.FAILED]
    assert "2 attempts" in published.calls[-1][1] and s.state is State.FAILED


def test_zero_attempts_fails_at_once() -> None:
    published, backend = Published(), Backend(up=False)
    s = supervisor(backend, published, restart=backend.restart, policy=RestartPolicy(attempts=0))
    assert s.step() is State.FAILED
    assert backend.restarts == 0 and published.states == [State.FAILED]


def test_pauses_double() -> None:
    assert RestartPolicy(attempts=3, first_pause=0.5).pauses() == [0.5, 1.0, 2.0]
    assert RestartPolicy(attempts=0).pauses() == []


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_thread_runs_steps_until_stopped() -> None:
    published, backend = Published(), Backend(up=True)
    checks = []

    def ready() -> bool:
        checks.append(1)
        return backend.ready()

    s = Supervisor(ready, published, restart=backend.restart, dead=lambda: not backend.up, policy=FAST, interval=0.01)
    s.start()
    try:
        wait_until(lambda: published.states == [State.SERVING])
        backend.up = False
        wait_until(lambda: s.restarts == 1)
        wait_until(lambda: published.states[-1] is State.SERVING)
    finally:
        s.stop()
    assert s._thread is not None and not s._thread.is_alive()
    seen = len(checks)
    time.sleep(0.1)
    assert len(checks) == seen  # no steps after stop


def test_thread_ends_by_itself_when_failed() -> None:
    published, backend = Published(), Backend(up=False, fail_restarts=99)
    s = Supervisor(backend.ready, published, restart=backend.restart, policy=FAST, interval=0.01).start()
    try:
        wait_until(lambda: State.FAILED in published.states)
        assert s._thread is not None
        s._thread.join(timeout=5)
        assert not s._thread.is_alive()
    finally:
        s.stop()
    assert published.states.count(State.FAILED) == 1


def test_stop_interrupts_the_pause_between_attempts() -> None:
    published, backend = Published(), Backend(up=False, fail_restarts=99)
    s = Supervisor(backend.ready, published, restart=backend.restart, policy=RestartPolicy(attempts=3, first_pause=60))
    result: list[State] = []
    worker = threading.Thread(target=lambda: result.append(s.step()))
    worker.start()
    wait_until(lambda: backend.restarts == 1)
    started = time.monotonic()
    s.stop()
    worker.join(timeout=5)
    assert not worker.is_alive() and time.monotonic() - started < 5
    assert result == [State.DOWN] and State.FAILED not in published.states


def test_one_failing_check_does_not_end_the_watch() -> None:
    published, backend = Published(), Backend(up=True)
    calls = []

    def ready() -> bool:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("/proc raced with an exiting process")
        return backend.ready()

    s = Supervisor(ready, published, interval=0.01).start()
    try:
        wait_until(lambda: len(calls) >= 2)
        backend.up = False
        wait_until(lambda: State.DOWN in published.states, timeout=2)
    finally:
        s.stop()
