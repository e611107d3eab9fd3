"""Health that tells the truth: watch the backend, restart a crashed Triton, give up loudly.

Every `interval` seconds the supervisor asks whether the backend can serve. Readiness follows the
answer: a dead Triton takes the pod out of rotation within one probe; a live one that misses a probe
(a readiness call slowed down by a loaded machine) only after `down_after` misses in a row, so one slow
answer does not fail every call. When the Triton that
the scorer started itself (PyTriton) has died, the supervisor restarts it, up to `attempts` times
in a row with doubling pauses; once Triton serves again, readiness returns. When every attempt
fails, the state becomes FAILED: liveness turns NOT_SERVING and `cheems serve` exits with status 1,
so Kubernetes (or systemd, or the user) starts a fresh process. An external Triton (`--triton-url`)
is never restarted; readiness just follows it.

The loop is plain code over three callables, so it is tested with fakes as well as a real SIGKILL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

log = logging.getLogger(__name__)


class State(StrEnum):
    SERVING = "serving"
    DOWN = "down"  # not ready; a restart may be under way
    FAILED = "failed"  # restarts exhausted: the process should be replaced


@dataclass(frozen=True)
class RestartPolicy:
    attempts: int = 3
    first_pause: float = 1.0  # seconds before the second attempt; doubles after each failure

    def pauses(self) -> list[float]:
        return [self.first_pause * 2**i for i in range(self.attempts)]


class Supervisor:
    def __init__(
        self,
        ready: Callable[[], bool],
        publish: Callable[[State, str], None],
        restart: Callable[[], None] | None = None,
        dead: Callable[[], bool] = lambda: True,
        policy: RestartPolicy | None = None,
        interval: float = 0.5,
        down_after: int = 2,
    ) -> None:
        """`ready`: can the backend serve now; `dead`: is it gone for good (not just busy), so that
        `restart` (None: never restart) should bring up a new one; `publish(state, why)` is told of
        every change of state."""
        self.ready, self.publish, self.restart, self.dead = ready, publish, restart, dead
        self.policy, self.interval, self.down_after = policy or RestartPolicy(), interval, down_after
        self._misses = 0  # not-ready answers in a row from a backend that is not dead
        self.state: State | None = None
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _set(self, state: State, why: str) -> None:
        if state != self.state or state is not State.SERVING:
            log.log(logging.INFO if state is State.SERVING else logging.WARNING, "backend %s: %s", state, why)
        self.state = state
        self.publish(state, why)

    def step(self) -> State:
        """One check; restarts the backend when it died. Returns the state it left."""
        if self.ready():
            self._misses = 0
            if self.state is not State.SERVING:
                self._set(State.SERVING, "ready")
            return State.SERVING
        if self.restart is None or not self.dead():
            self._misses += 1
            if self.state is State.SERVING and self._misses < self.down_after:
                log.info("backend missed a readiness check (%d of %d)", self._misses, self.down_after)
                return State.SERVING
            if self.state is not State.DOWN:
                self._set(State.DOWN, "the backend is not ready")
            return State.DOWN
        for attempt, pause in enumerate(self.policy.pauses(), 1):
            self._set(State.DOWN, f"Triton died; restarting it (attempt {attempt}/{self.policy.attempts})")
            try:
                self.restart()
                if self.ready():
                    self.restarts += 1
                    self._set(State.SERVING, f"restarted (restart {self.restarts} of this process)")
                    return State.SERVING
            except Exception as e:
                log.warning("restart attempt %d failed: %s", attempt, e)
            if self._stop.wait(pause):
                return State.DOWN
        self._set(State.FAILED, f"Triton could not be restarted in {self.policy.attempts} attempts")
        return State.FAILED

    def start(self) -> Supervisor:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    if self.step() is State.FAILED:
                        return
                except Exception:  # one failed check must not end the watch and freeze health
                    log.exception("backend check failed")

        self._thread = threading.Thread(target=loop, name="scorer-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
