"""MLflow: a run in an MLflow tracking store, through MlflowClient (the `mlflow` extra: mlflow-skinny).

The store is `tracking_uri`: a database (sqlite:///path, postgresql://...) or an MLflow server (http://...). The run
goes in `experiment` (made when missing) under `run_name`; its id is what the training and its model keep. A resumed
run (same out_dir) logs on into the run it started, when the store still has it.

Metrics are logged asynchronously (MLflow's own queue and thread: a SQLite commit takes milliseconds, which a
training step does not wait for), one batch a flush of the step log; `close` waits for them before it ends the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from cheems.extras import need

BATCH = 100  # MLflow's most parameters in one log_batch
METRICS = 1000  # and metrics


class MlflowRun:
    name = "mlflow"

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, previous: str | None = None) -> None:
        need("mlflow", instead="--set report_to without mlflow")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        run = self._resumed(previous) if previous else None
        self.resumed = run is not None
        self.pending: list[Any] = []  # the asynchronous batches' operations, waited for at close
        if run is None:
            run = self.client.create_run(self._experiment(experiment), run_name=run_name or None)
        self.id: str = run.info.run_id

    def _experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        known = self.client.get_experiment_by_name(name)
        if known is not None:
            return str(known.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except MlflowException:  # made meanwhile by another training
            return str(self.client.get_experiment_by_name(name).experiment_id)  # type: ignore[union-attr]

    def _resumed(self, run_id: str) -> Any:
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        self.client.update_run(run_id, status="RUNNING")
        return run

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for chunk in _chunks(items, BATCH):
            self.client.log_batch(self.id, params=chunk)

    def log(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for step, scalars in steps for k, v in scalars.items()]
        for chunk in _chunks(metrics, METRICS):
            self.pending.append(self.client.log_batch(self.id, metrics=chunk, synchronous=False))

    def close(self, failed: bool = False) -> None:
        try:
            for operation in self.pending:
                operation.wait()  # raises what the batch met (the fan-out warns)
        finally:
            self.pending = []
            self.client.set_terminated(self.id, "FAILED" if failed else "FINISHED")


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
