"""The batcher on its own, with a stand-in forward: which calls share a forward, in which order, and how one
call's deadline, departure or failure stays its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from services.scorer.batcher import Batcher, BatchLimits, Work
from services.scorer.deadline import Deadline
from services.scorer.errors import BackendUnavailable, ClientGone, DeadlineExceeded, ScorerError


class Forward:
    """A stand-in `run`: a reward per sequence (its first token / 10), the batches it saw, and a gate that
    holds the forward in progress until a test opens it."""

    def __init__(self, poison: int | None = None) -> None:
        self.batches: list[list[list[int]]] = []  # per forward, the first token of each call's sequences
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.poison = poison  # a first token that makes any batch holding it fail

    def __call__(self, works: Sequence[Work]) -> list[list[float]]:
        self.started.set()
        self.gate.wait(10)
        firsts = [[s[0] for s in w.sequences] for w in works]
        self.batches.append(firsts)
        if self.poison is not None and any(self.poison in f for f in firsts):
            raise RuntimeError("this forward fails")
        return [[s[0] / 10 for s in w.sequences] for w in works]


def work(*firsts: int, length: int = 4) -> Work:
    sequences = [[f] * length for f in firsts]
    return Work(sequences, length * len(firsts))


def later(seconds: float = 30.0, is_active: Callable[[], bool] = lambda: True) -> Deadline:
    return Deadline.of(seconds, 60.0, is_active)


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(16) as executor:
        yield executor


def held_batcher(limits: BatchLimits, forward: Forward) -> tuple[Batcher, Future[list[float]], Any]:
    """A batcher whose first forward (one call, first token 0) is in progress and held at the gate."""
    batcher = Batcher(forward, limits)
    forward.gate.clear()
    executor = ThreadPoolExecutor(16)
    first = executor.submit(batcher.submit, work(0), later())
    assert forward.started.wait(5)
    return batcher, first, executor


def submit_queued(batcher: Batcher, executor: Any, works: list[Work], deadline: Deadline | None = None) -> list[Any]:
    """Submit `works` in order while the forward is held; returns once they are all queued."""
    futures = []
    for w in works:
        futures.append(executor.submit(batcher.submit, w, deadline or later()))
        until = time.monotonic() + 5
        while len(batcher._queue) < len(futures) and time.monotonic() < until:
            time.sleep(0.001)
    return futures


def test_calls_queued_behind_a_forward_share_the_next_one_oldest_first_and_each_gets_its_own_rewards() -> None:
    forward = Forward()
    batcher, first, executor = held_batcher(BatchLimits(max_sequences=64, max_tokens=10_000), forward)
    futures = submit_queued(batcher, executor, [work(1, 2), work(3), work(4, 5, 6)])
    forward.gate.set()
    assert first.result(5) == [0.0]
    assert [f.result(5) for f in futures] == [[0.1, 0.2], [0.3], [0.4, 0.5, 0.6]]
    assert forward.batches == [[[0]], [[1, 2], [3], [4, 5, 6]]]  # one forward for the three, in arrival order
    batcher.close()
    executor.shutdown()


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # sequences: 2 + 1 fit in 3, the third call waits for the next forward
        (BatchLimits(max_sequences=3, max_tokens=10_000), [[[0]], [[1, 2], [3]], [[4, 5, 6]]]),
        # tokens (4 a sequence): 8 + 4 = 12 fit, 12 + 12 do not
        (BatchLimits(max_sequences=64, max_tokens=12), [[[0]], [[1, 2], [3]], [[4, 5, 6]]]),
        # a call over the limit alone still runs (alone), never split from its sequences
        (BatchLimits(max_sequences=1, max_tokens=10_000), [[[0]], [[1, 2]], [[3]], [[4, 5, 6]]]),
    ],
)
def test_a_forward_takes_whole_calls_within_the_sequence_and_token_limits(
    limits: BatchLimits, expected: list[list[list[int]]]
) -> None:
    forward = Forward()
    batcher, _first, executor = held_batcher(limits, forward)
    futures = submit_queued(batcher, executor, [work(1, 2), work(3), work(4, 5, 6)])
    forward.gate.set()
    assert [f.result(5) for f in futures] == [[0.1, 0.2], [0.3], [0.4, 0.5, 0.6]]
    assert forward.batches == expected
    batcher.close()
    executor.shutdown()


def test_a_call_alone_runs_at_once_without_waiting_for_the_queue_delay() -> None:
    forward = Forward()
    batcher = Batcher(forward, BatchLimits(queue_delay=5.0))
    started = time.monotonic()
    assert batcher.submit(work(7), later()) == [0.7]
    assert time.monotonic() - started < 2.5  # nobody else was tokenizing: no 5 s wait
    batcher.close()


def test_the_forward_waits_for_calls_still_tokenizing_but_no_longer_than_the_queue_delay(pool: Any) -> None:
    forward = Forward()
    batcher = Batcher(forward, BatchLimits(queue_delay=5.0))
    tokenized = threading.Event()

    def slow_call() -> list[float]:
        with batcher.arriving():
            tokenized.wait(5)  # tokenizing
        return batcher.submit(work(2), later())

    slow = pool.submit(slow_call)
    time.sleep(0.05)  # the slow call is tokenizing
    fast = pool.submit(batcher.submit, work(1), later())
    time.sleep(0.2)
    assert forward.batches == []  # the first call waits for the one being tokenized
    tokenized.set()
    assert fast.result(5) == [0.1] and slow.result(5) == [0.2]
    assert forward.batches == [[[1], [2]]]  # one forward for both

    bounded = Batcher(Forward(), BatchLimits(queue_delay=0.1))
    with bounded.arriving():  # a call that never finishes tokenizing holds nobody past the delay
        started = time.monotonic()
        assert bounded.submit(work(3), later()) == [pytest.approx(0.3)]
        assert time.monotonic() - started < 2.0
    batcher.close()
    bounded.close()


def test_a_deadline_passing_in_the_queue_fails_that_call_at_once_and_the_forward_never_sees_it() -> None:
    forward = Forward()
    batcher, first, executor = held_batcher(BatchLimits(), forward)
    short = executor.submit(batcher.submit, work(1), later(0.2))
    (other,) = submit_queued(batcher, executor, [work(2)])
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        short.result(5)
    assert time.monotonic() - started < 1.5  # not held until the forward in progress ends
    forward.gate.set()
    assert other.result(5) == [0.2] and first.result(5) == [0.0]
    assert forward.batches == [[[0]], [[2]]]  # the expired call was dropped, the other untouched
    batcher.close()
    executor.shutdown()


def test_a_deadline_passing_during_its_forward_fails_only_that_call() -> None:
    forward = Forward()
    batcher, first, executor = held_batcher(BatchLimits(), forward)
    forward.started.clear()
    short, other = submit_queued(batcher, executor, [work(1)], later(0.5)) + submit_queued(batcher, executor, [work(2)])
    forward.gate.set()  # the second forward (both calls) starts, and is then held
    forward.gate.clear()
    assert first.result(5) == [0.0]
    assert forward.started.wait(5)
    with pytest.raises(DeadlineExceeded):
        short.result(5)
    forward.gate.set()
    assert other.result(5) == [0.2]
    batcher.close()
    executor.shutdown()


def test_a_caller_that_goes_away_is_dropped_and_the_others_are_served() -> None:
    forward = Forward()
    batcher, _first, executor = held_batcher(BatchLimits(), forward)
    active = threading.Event()
    active.set()
    leaving = executor.submit(batcher.submit, work(1), later(30, active.is_set))
    (staying,) = submit_queued(batcher, executor, [work(2)])
    active.clear()  # the caller cancels (gRPC: context.is_active() turns False)
    with pytest.raises(ClientGone):
        leaving.result(5)
    forward.gate.set()
    assert staying.result(5) == [0.2]
    assert forward.batches == [[[0]], [[2]]]
    batcher.close()
    executor.shutdown()


def test_a_failing_batch_is_run_again_call_by_call_so_only_the_bad_call_fails() -> None:
    forward = Forward(poison=9)
    batcher, _first, executor = held_batcher(BatchLimits(), forward)
    good, bad, also_good = submit_queued(batcher, executor, [work(1), work(9), work(3)])
    forward.gate.set()
    assert good.result(5) == [0.1] and also_good.result(5) == [0.3]
    with pytest.raises(ScorerError, match="inference failed: this forward fails"):
        bad.result(5)
    assert forward.batches[1] == [[1], [9], [3]]  # tried together first
    assert forward.batches[2:] == [[[1]], [[9]], [[3]]]  # then alone
    batcher.close()
    executor.shutdown()


def test_close_fails_the_queued_calls_as_unavailable_after_the_forward_in_progress() -> None:
    forward = Forward()
    batcher, first, executor = held_batcher(BatchLimits(), forward)
    queued = submit_queued(batcher, executor, [work(1), work(2)])
    closing = executor.submit(batcher.close)
    for future in queued:
        with pytest.raises(BackendUnavailable):
            future.result(5)
    assert not closing.done()  # close waits for the forward in progress ...
    forward.gate.set()
    assert first.result(5) == [0.0]  # ... which ends normally
    closing.result(5)
    with pytest.raises(BackendUnavailable):
        batcher.submit(work(3), later())  # nothing new is taken
    executor.shutdown()


def test_limits_refuse_nonsense_naming_the_field() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        BatchLimits(max_tokens=0)
    with pytest.raises(ValueError, match="queue_delay"):
        BatchLimits(queue_delay=-1)


def test_a_batch_whose_callers_all_left_is_not_retried_when_its_run_stops() -> None:
    forward = Forward(poison=9)  # fails, as `run` does when it stops between forwards
    batcher, first, executor = held_batcher(BatchLimits(), forward)
    forward.started.clear()
    gone = submit_queued(batcher, executor, [work(9), work(8)], later(0.3))
    forward.gate.set()  # the first forward ends; the two calls' forward starts and is held
    forward.gate.clear()
    assert first.result(5) == [0.0] and forward.started.wait(5)
    for future in gone:
        with pytest.raises(DeadlineExceeded):
            future.result(5)
    forward.gate.set()  # it fails now that nobody waits for it
    assert batcher.submit(work(1), later()) == [0.1]
    assert forward.batches == [[[0]], [[9], [8]], [[1]]]  # not run again call by call
    batcher.close()
    executor.shutdown()
