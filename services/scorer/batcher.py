"""Calls that arrive together share one forward: the torch backend's batcher (Triton has its dynamic batcher).

    batcher = Batcher(run, BatchLimits(max_sequences=64, max_tokens=32768, queue_delay=0.002), name="rm")
    with batcher.arriving():                      # a call has started tokenizing for this model
        units = ...                               # its token sequences and their row plan
        values = batcher.submit(units, deadline)  # its rewards, from a forward it may share with other calls
    batcher.close()                               # queued calls fail as UNAVAILABLE; the forward in progress ends

One worker thread runs the model. While it is busy, calls queue; when it is free it takes the queued calls,
oldest first and whole, up to `max_sequences` sequences and `max_tokens` tokens (a call larger than that runs
alone, in as many forwards as it needs), and runs them as one batch (`run`). It waits for more only while
other calls for the same model are still tokenizing (`arriving`), and never more than `queue_delay` after the
oldest queued call came: a call alone is run at once, and concurrent calls are not run one by one.

Isolation: a call's rewards come from its own rows (its prefix sharing is planned within the call), so other
calls in the batch change only padding. A call whose deadline passes or whose caller leaves stops waiting at
once and is dropped if its forward has not started (a batch all of whose callers have gone may stop between
its forwards: `run` raises, and nothing is reported); when a batch fails, each call still waited for is run
again alone, so one call's failure is its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from services.scorer.deadline import Deadline
from services.scorer.errors import BackendUnavailable, ScorerError

log = logging.getLogger(__name__)
POLL = 0.05  # seconds between checks of a waiting call's caller (a gRPC cancellation has no callback here)


@dataclass(frozen=True)
class BatchLimits:
    """How much one forward takes, and how long the oldest queued call may wait for company."""

    max_sequences: int = 64
    max_tokens: int = 32768
    queue_delay: float = 0.002  # seconds

    def __post_init__(self) -> None:
        for name in ("max_sequences", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.queue_delay < 0:
            raise ValueError(f"queue_delay must be >= 0, got {self.queue_delay}")


@dataclass
class Work:
    """One call's share of a batch: its sequences, how many tokens they are, and its outcome."""

    sequences: Sequence[Sequence[int]]
    tokens: int
    plan: object = None  # the call's own row plan, passed back to `run` untouched
    arrived: float = field(default_factory=time.monotonic)
    started: float | None = None  # when the forward that holds it began (its wait: started - arrived)
    done: threading.Event = field(default_factory=threading.Event)
    values: list[float] | None = None
    error: BaseException | None = None
    abandoned: bool = False  # its caller stopped waiting: drop it unless its forward started

    def finish(self, values: list[float] | None = None, error: BaseException | None = None) -> None:
        self.values, self.error = values, error
        self.done.set()


# `run(works)` -> one list of rewards per work, in order; it raises for the whole batch
Run = Callable[[Sequence[Work]], list[list[float]]]


class Batcher:
    def __init__(self, run: Run, limits: BatchLimits, name: str = "model") -> None:
        self._run, self.limits = run, limits
        self._queue: deque[Work] = deque()
        self._arriving = 0
        self._closed = False
        self._cond = threading.Condition()
        self.forwards = 0  # batches run (for tests)
        self.on_batch: Callable[[int, int], None] = lambda calls, sequences: None  # (calls, sequences): metrics
        self._worker = threading.Thread(target=self._loop, name=f"batcher-{name}", daemon=True)
        self._worker.start()

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around a call's preparation (tokenizing): the worker waits up to the queue delay for such calls."""
        with self._cond:
            self._arriving += 1
        try:
            yield
        finally:
            with self._cond:
                self._arriving -= 1
                self._cond.notify_all()

    def submit(self, work: Work, deadline: Deadline) -> list[float]:
        """`work`'s rewards; DeadlineExceeded or ClientGone as soon as its deadline passes or its caller leaves."""
        with self._cond:
            if self._closed:
                raise BackendUnavailable("the model was closed (the scorer is stopping or switched models)")
            self._queue.append(work)
            self._cond.notify_all()
        try:
            while not work.done.wait(min(POLL, max(deadline.remaining(), 0.0))):
                deadline.check("inference")
        except ScorerError:
            with self._cond:
                work.abandoned = True
            raise
        if work.error is not None:
            raise work.error
        assert work.values is not None
        return work.values

    def close(self) -> None:
        """Queued calls fail as UNAVAILABLE; returns once the forward in progress (if any) has ended."""
        with self._cond:
            self._closed = True
            dropped = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for work in dropped:
            work.finish(error=BackendUnavailable("the model was closed (the scorer is stopping or switched models)"))
        if threading.current_thread() is not self._worker:
            self._worker.join()

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._execute(batch)

    def _next_batch(self) -> list[Work] | None:
        """The calls of the next forward (None once closed): at least one, oldest first, within the limits."""
        with self._cond:
            while True:
                while not self._closed and not self._queue:
                    self._cond.wait()
                if self._closed:
                    return None
                while not self._closed and self._arriving > 0 and not self._full():
                    left = self._queue[0].arrived + self.limits.queue_delay - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = self._take()
                if batch:
                    return batch

    def _full(self) -> bool:
        sequences = sum(len(w.sequences) for w in self._queue)
        tokens = sum(w.tokens for w in self._queue)
        return sequences >= self.limits.max_sequences or tokens >= self.limits.max_tokens

    def _take(self) -> list[Work]:
        """Whole calls from the head of the queue while they fit (the first always); abandoned ones dropped."""
        batch: list[Work] = []
        sequences = tokens = 0
        while self._queue:
            work = self._queue[0]
            if work.abandoned:
                self._queue.popleft()
                continue
            fits = sequences + len(work.sequences) <= self.limits.max_sequences
            if batch and not (fits and tokens + work.tokens <= self.limits.max_tokens):
                break
            batch.append(self._queue.popleft())
            sequences, tokens = sequences + len(work.sequences), tokens + work.tokens
        return batch

    def _execute(self, batch: list[Work]) -> None:
        now = time.monotonic()
        for work in batch:
            work.started = work.started or now  # a call run again alone keeps its first start
        try:
            results = self._run(batch)
        except Exception as e:
            batch = [w for w in batch if not w.abandoned]  # their callers have gone: nothing to retry or report
            if not batch:
                return
            if len(batch) == 1:
                log.warning("a forward of %d sequences failed: %s", len(batch[0].sequences), e)
                failed = e if isinstance(e, ScorerError) else ScorerError(f"inference failed: {e}")
                batch[0].finish(error=failed)
                return
            log.warning("a batch of %d calls failed (%s): running each alone", len(batch), e)
            for work in batch:
                self._execute([work])
            return
        self.forwards += 1
        self.on_batch(len(batch), sum(len(w.sequences) for w in batch))
        for work, values in zip(batch, results, strict=True):
            work.finish(values)
