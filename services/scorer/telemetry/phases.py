"""Where a call's time went: tokenizing, waiting in the backend's queue, inference; the clock of one call.

    with call_clock() as clock:        # the scorer, around one call to one model
        ...tokenize...; clock.tokenized()
        ...backend.score(...)...       # the torch backend reports its queue wait: note_queue(seconds)
        clock.inferred()
    clock.phases()                     # {"tokenize": s, "queue": s, "inference": s, "total": s}

The clock is found through a context variable: the torch backend's `score` runs on the caller's thread, so it
can say how long the call's work waited for the batcher's worker without the Backend protocol changing. A backend
that does not say (Triton, vLLM: their queues are theirs, in their own metrics) leaves `queue` out, and its wait
stays inside `inference`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

PHASES = ("tokenize", "queue", "inference", "total")


@dataclass
class CallClock:
    """perf_counter readings of one call, and the seconds its work waited in the backend's queue (None: not said)."""

    started: float = field(default_factory=time.perf_counter)
    tokenize_end: float | None = None
    inference_end: float | None = None
    queued: float | None = None

    def tokenized(self) -> float:
        self.tokenize_end = time.perf_counter()
        return self.tokenize_end

    def inferred(self) -> float:
        self.inference_end = time.perf_counter()
        return self.inference_end

    def phases(self) -> dict[str, float]:
        """Seconds per phase: tokenize, queue (only when the backend said), inference (without the queue), total."""
        tokenized = self.tokenize_end if self.tokenize_end is not None else self.started
        ended = self.inference_end if self.inference_end is not None else tokenized
        out = {"tokenize": tokenized - self.started}
        inference = ended - tokenized
        if self.queued is not None:
            queued = min(self.queued, inference)  # rounds of one call may overlap nothing: never more than it took
            out["queue"] = queued
            inference -= queued
        out["inference"] = inference
        out["total"] = ended - self.started
        return out


_current: ContextVar[CallClock | None] = ContextVar("cheems_scorer_call_clock", default=None)


@contextmanager
def call_clock() -> Iterator[CallClock]:
    """A clock for one call, the current one for the code it runs (the backend's `note_queue`)."""
    clock = CallClock()
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)


def note_queue(seconds: float) -> None:
    """The backend: the current call's work waited `seconds` for the model (added up over its rounds)."""
    clock = _current.get()
    if clock is not None:
        clock.queued = (clock.queued or 0.0) + max(seconds, 0.0)
