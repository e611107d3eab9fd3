"""One deadline per call, shared by everything the call does. Pure: a clock and a liveness check in.

gRPC gives a handler `context.time_remaining()`; a client that set no deadline (grpcurl, Go and Java
stubs by default) shows up as about 9.2e18 seconds, which is "none", not a number to pass on. Such
calls get the server's own cap (`ScorerConfig.max_call_seconds`) so no call can hold resources forever.

    deadline = Deadline.of(context.time_remaining(), cap=300.0, is_active=context.is_active)
    deadline.check("tokenizing")      # DeadlineExceeded when time is up, ClientGone when the caller left
    backend.score(seqs, deadline.remaining())
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.scorer.errors import ClientGone, DeadlineExceeded

NO_DEADLINE = 1e9  # seconds; any "remaining time" above this (31 years) means the caller set none


def always() -> bool:
    """The liveness check of a caller that cannot go away (a local call)."""
    return True


@dataclass
class Deadline:
    expires: float  # on `clock`'s scale
    clock: Callable[[], float] = time.monotonic
    is_active: Callable[[], bool] = field(default=always)
    caller_set: bool = True  # False when the server's cap applies (the caller sent no deadline, or a later one)

    @classmethod
    def of(
        cls,
        remaining: float | None,
        cap: float,
        is_active: Callable[[], bool] = always,
        clock: Callable[[], float] = time.monotonic,
    ) -> Deadline:
        """From a caller's remaining seconds (None or huge = no deadline), never later than `cap`."""
        caller_set = remaining is not None and remaining < NO_DEADLINE and remaining <= cap
        seconds = remaining if caller_set and remaining is not None else cap
        return cls(clock() + seconds, clock, is_active, caller_set)

    def remaining(self) -> float:
        return self.expires - self.clock()

    def check(self, stage: str) -> float:
        """Seconds left; raises DeadlineExceeded when none are, ClientGone when the caller has left."""
        left = self.remaining()
        if left <= 0:  # first: gRPC also marks a call whose deadline passed as inactive
            whose = "the caller's deadline" if self.caller_set else "the server's limit per call (max_call_seconds)"
            raise DeadlineExceeded(f"{whose} passed before {stage}")
        if not self.is_active():
            raise ClientGone(f"the caller went away before {stage}")
        return left
