"""services/scorer/telemetry/phases.py: a call's phases from its clock readings, and the queue a backend reports."""

from __future__ import annotations

import threading

import pytest

from services.scorer.telemetry.phases import PHASES, CallClock, call_clock, note_queue


def test_phases_split_the_call_and_the_queue_comes_out_of_inference() -> None:
    clock = CallClock(started=10.0, tokenize_end=10.5, inference_end=13.0, queued=1.0)
    assert clock.phases() == {"tokenize": 0.5, "queue": 1.0, "inference": 1.5, "total": 3.0}
    assert set(clock.phases()) == set(PHASES)


def test_a_backend_that_says_nothing_of_its_queue_has_no_queue_phase() -> None:
    clock = CallClock(started=1.0, tokenize_end=1.25, inference_end=2.0)
    assert clock.phases() == {"tokenize": 0.25, "inference": 0.75, "total": 1.0}


def test_a_queue_is_never_longer_than_the_inference_it_is_part_of() -> None:
    clock = CallClock(started=0.0, tokenize_end=1.0, inference_end=2.0, queued=5.0)
    assert clock.phases()["queue"] == 1.0 and clock.phases()["inference"] == 0.0


def test_a_call_that_failed_before_inference_has_its_tokenize_time_only() -> None:
    clock = CallClock(started=0.0, tokenize_end=0.5)
    assert clock.phases() == {"tokenize": 0.5, "inference": 0.0, "total": 0.5}


def test_note_queue_adds_up_on_the_current_call_and_nowhere_else() -> None:
    note_queue(3.0)  # no call: nothing to note it on, and no error
    seen: list[float | None] = []

    def other_call() -> None:
        with call_clock() as clock:
            note_queue(0.25)
            seen.append(clock.queued)

    with call_clock() as mine:
        note_queue(0.5)
        note_queue(0.25)
        thread = threading.Thread(target=other_call)
        thread.start()
        thread.join()
        note_queue(-1.0)  # a clock that went backwards counts as no wait
    assert mine.queued == pytest.approx(0.75) and seen == [0.25]
    with call_clock() as nested_outer:
        with call_clock() as nested_inner:
            note_queue(1.0)
        note_queue(2.0)
    assert (nested_inner.queued, nested_outer.queued) == (1.0, 2.0)
