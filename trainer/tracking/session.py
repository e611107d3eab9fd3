"""A training run's reporting from its TrainConfig: which backends, where, and the parameters they get first.

    with start_tracking(config, world, step=0) as tracking:    # rank 0; an empty Tracking on other ranks
        ...
        tracking.log(records)

Backends: TensorBoard in OUT/tensorboard; MLflow in `tracking_uri` (or MLFLOW_TRACKING_URI, else
sqlite:///<out_dir's parent>/mlflow.db: the runs trained side by side share a store), experiment `experiment`;
W&B in project `experiment`, files in OUT/wandb. A run resumed from a checkpoint in the same out_dir goes on with
the runs it started (their ids are in OUT/metrics.jsonl's records). The parameters: every TrainConfig field, the
training data's sha256 (as the exported model's metadata has it), the world size and the device.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cheems.extras import need
from trainer.config import TrainConfig
from trainer.data.cache import files_digest
from trainer.distributed import World
from trainer.tracking.fanout import Backend, Tracking
from trainer.tracking.scalars import run_params

METRICS = "metrics.jsonl"
KEY = "tracking"  # the step record that carries the runs' ids: {backend: id}


def check_installed(report_to: list[str]) -> None:
    """MissingExtra, naming the package and how to go on, for a backend whose package is not here: said before the
    model loads rather than after."""
    for name in report_to:
        if name == "tensorboard":
            from trainer.tracking.tensorboard import check_installed as check_tensorboard

            check_tensorboard()
        else:
            need(name, instead=f"--set report_to without {name}")


def start_tracking(config: TrainConfig, world: World, step: int = 0) -> Tracking:
    """The run's Tracking, its parameters logged (on a fresh run); `step`: the step it starts after (a resume)."""
    if not world.is_main or not config.report_to:
        return Tracking()
    out = Path(config.out_dir)
    previous = previous_ids(out / METRICS) if step else {}
    tracking = Tracking()
    try:
        for name in config.report_to:
            tracking.runs.append(_open(name, config, out, step, previous.get(name)))
    except BaseException:
        tracking.close(failed=True)
        raise
    tracking.ids = {run.name: run.id for run in tracking.runs}
    extra = {
        "data_sha256": files_digest(config.train_files),
        "world_size": world.size,
        "device": world.device.type,
        "learning_rate": config.learning_rate,  # lr as resolved (0 = the mode's default)
    }
    tracking.log_params(run_params(config.to_dict(), extra))
    return tracking


def _open(name: str, config: TrainConfig, out: Path, step: int, previous: str | None) -> Backend:
    run_name = config.run_name or out.resolve().name
    if name == "tensorboard":
        from trainer.tracking.tensorboard import FOLDER, TensorBoardRun

        return TensorBoardRun(out / FOLDER, step + 1)
    if name == "mlflow":
        from trainer.tracking.mlflow import MlflowRun

        return MlflowRun(tracking_uri(config), config.experiment, run_name, previous)
    from trainer.tracking.wandb import WandbRun

    return WandbRun(config.experiment, run_name, out, previous)


def tracking_uri(config: TrainConfig) -> str:
    """MLflow's store: the config's, MLFLOW_TRACKING_URI's, or a SQLite file beside the run's out_dir."""
    default = f"sqlite:///{Path(config.out_dir).resolve().parent / 'mlflow.db'}"
    return config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default


def previous_ids(metrics: Path) -> dict[str, str]:
    """The runs' ids the last record of a metrics.jsonl that has them names ({} when none does)."""
    found: dict[str, str] = {}
    try:
        lines = metrics.read_text(encoding="utf-8").splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            record: Any = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get(KEY), dict):
            found = {str(k): str(v) for k, v in record[KEY].items()}
    return found
