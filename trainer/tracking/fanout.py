"""One run's reporting, fanned out to every backend `report_to` names; nothing at all when it names none.

    with Tracking([TensorBoardRun(dir), MlflowRun(uri, "cheems", "t-1")]) as tracking:
        tracking.log_params(run_params(...))
        tracking.log(records)          # step records as written to metrics.jsonl: plain floats, no device wait
    tracking.ids                       # {"tensorboard": "/abs/OUT/tensorboard", "mlflow": "<run id>"}

A backend that fails while the run goes on (its server away) is warned about once and left out from then on: a
report is not worth a training. Leaving the `with` block by an exception marks the runs failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Protocol

from trainer.tracking.scalars import step_scalars

log = logging.getLogger(__name__)


class Backend(Protocol):
    name: str
    id: str  # what the training and its model keep: a run id, or TensorBoard's log directory
    resumed: bool  # it goes on with a run started before (its parameters are there)

    def log_params(self, params: dict[str, str]) -> None: ...

    def log(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        """Each (step, its scalars) of one flush of the step log."""
        ...

    def close(self, failed: bool = False) -> None: ...


class Tracking:
    def __init__(self, runs: Iterable[Backend] = ()) -> None:
        self.runs = list(runs)
        self.ids = {run.name: run.id for run in self.runs}  # kept after a backend is dropped or closed

    def log_params(self, params: dict[str, str]) -> None:
        for run in list(self.runs):
            if not run.resumed:
                self._call(run, run.log_params, params)

    def log(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Each record's scalars (`scalars.step_scalars`) at its step, in every backend."""
        steps = [(int(record["step"]), step_scalars(record)) for record in records]
        for run in list(self.runs):
            self._call(run, run.log, steps)

    def _call(self, run: Backend, method: Any, *args: Any) -> None:
        try:
            method(*args)
        except Exception:
            log.warning("%s: reporting failed; the run goes on without it", run.name, exc_info=True)
            self.runs.remove(run)

    def close(self, failed: bool = False) -> None:
        for run in self.runs:
            try:
                run.close(failed)
            except Exception:
                log.warning("%s: closing the run failed", run.name, exc_info=True)
        self.runs = []

    def __enter__(self) -> Tracking:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close(failed=error is not None)
