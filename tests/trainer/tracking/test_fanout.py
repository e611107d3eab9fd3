"""The fan-out: every backend gets the same scalars; one that fails is dropped, the others go on."""

from __future__ import annotations

import logging

import pytest

from trainer.tracking.fanout import Tracking


class Recorder:
    def __init__(self, name: str, fail_at: int | None = None, resumed: bool = False) -> None:
        self.name, self.id, self.resumed, self.fail_at = name, f"id-{name}", resumed, fail_at
        self.params: dict[str, str] = {}
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.calls = 0
        self.closed: bool | None = None

    def log_params(self, params: dict[str, str]) -> None:
        self.params = params

    def log(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        self.calls += 1
        if any(step == self.fail_at for step, _ in steps):
            raise ConnectionError("tracking server away")
        self.logged += steps

    def close(self, failed: bool = False) -> None:
        self.closed = failed


def test_a_failing_backend_is_dropped_with_a_warning_and_the_others_get_every_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steady, flaky, resumed = Recorder("a"), Recorder("b", fail_at=2), Recorder("c", resumed=True)
    with Tracking([steady, flaky, resumed]) as tracking:
        tracking.log_params({"lr": "0.1"})
        tracking.log([{"step": 1, "loss": 0.5}])
        tracking.log([{"step": 2, "loss": 0.4}, {"step": 3, "loss": 0.3}])  # one flush: one call a backend
        tracking.log([{"step": 4, "loss": 0.2}])
    assert [s for s, _ in steady.logged] == [1, 2, 3, 4] and steady.logged[2][1] == {"train/loss": 0.3}
    assert steady.calls == 3 and flaky.calls == 2  # dropped at its failure: not called again
    assert [s for s, _ in flaky.logged] == [1] and flaky.closed is None
    assert steady.params == {"lr": "0.1"} and resumed.params == {}  # a resumed run has its parameters
    assert steady.closed is False and resumed.closed is False
    assert tracking.ids == {"a": "id-a", "b": "id-b", "c": "id-c"}  # the dropped one's run still exists
    assert "b: reporting failed; the run goes on without it" in caplog.text


def test_leaving_by_an_exception_marks_the_runs_failed() -> None:
    run = Recorder("a")
    with pytest.raises(RuntimeError), Tracking([run]):
        raise RuntimeError("out of memory")
    assert run.closed is True


def test_no_backend_reports_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with Tracking() as tracking:
        tracking.log([{"step": 1, "loss": 0.5}])
    assert tracking.ids == {} and caplog.records == []
