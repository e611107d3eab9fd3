"""Deadline: one per call, from the caller's remaining seconds (or none) and the server's cap. Fake clock."""

from __future__ import annotations

import pytest

from services.scorer.deadline import NO_DEADLINE, Deadline
from services.scorer.errors import ClientGone, DeadlineExceeded

GRPC_NO_DEADLINE = 9.2e18  # what `context.time_remaining()` reports when the caller set no deadline


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.mark.parametrize("remaining", [None, GRPC_NO_DEADLINE, NO_DEADLINE, float("inf")])
def test_no_deadline_from_the_caller_uses_the_cap(clock: FakeClock, remaining: float | None) -> None:
    deadline = Deadline.of(remaining, cap=300.0, clock=clock)
    assert deadline.caller_set is False
    assert deadline.remaining() == pytest.approx(300.0)
    assert deadline.expires == pytest.approx(800.0)


def test_a_caller_deadline_shorter_than_the_cap_is_kept(clock: FakeClock) -> None:
    deadline = Deadline.of(3.0, cap=300.0, clock=clock)
    assert deadline.caller_set is True
    assert deadline.remaining() == pytest.approx(3.0)


def test_a_caller_deadline_longer_than_the_cap_is_capped(clock: FakeClock) -> None:
    deadline = Deadline.of(1000.0, cap=300.0, clock=clock)
    assert deadline.remaining() == pytest.approx(300.0)
    assert deadline.caller_set is False  # when it passes, the error names the server's cap, not the caller
    clock.now += 300.0
    with pytest.raises(DeadlineExceeded, match=r"max_call_seconds.*before inference"):
        deadline.check("inference")


def test_check_returns_the_seconds_left_then_raises_naming_the_caller(clock: FakeClock) -> None:
    deadline = Deadline.of(3.0, cap=300.0, clock=clock)
    assert deadline.check("tokenizing") == pytest.approx(3.0)
    clock.now += 2.5
    assert deadline.check("inference") == pytest.approx(0.5)
    clock.now += 0.5  # exactly at expiry: no time left
    with pytest.raises(DeadlineExceeded, match="the caller's deadline passed before inference"):
        deadline.check("inference")


def test_an_expired_cap_names_max_call_seconds(clock: FakeClock) -> None:
    deadline = Deadline.of(None, cap=0.5, clock=clock)
    clock.now += 0.6
    with pytest.raises(DeadlineExceeded, match=r"max_call_seconds.*before tokenizing"):
        deadline.check("tokenizing")


def test_a_caller_who_left_is_client_gone_even_with_time_left(clock: FakeClock) -> None:
    active = [True]
    deadline = Deadline.of(None, cap=300.0, is_active=lambda: active[0], clock=clock)
    assert deadline.check("tokenizing") == pytest.approx(300.0)
    active[0] = False
    with pytest.raises(ClientGone, match="went away before inference"):
        deadline.check("inference")


def test_an_expired_deadline_is_deadline_exceeded_even_though_grpc_calls_it_inactive(clock: FakeClock) -> None:
    deadline = Deadline.of(1.0, cap=300.0, is_active=lambda: False, clock=clock)
    clock.now += 5
    with pytest.raises(DeadlineExceeded):
        deadline.check("inference")
