"""Where a training runs: a local process group (`local`) or a Kubernetes Indexed Job (`kubernetes`).

    handle = launcher.start(spec)          # stored with the training; survives a restart of the service
    launcher.status(handle, spec.out_dir)  # Status("running") ... Status("succeeded") | ("failed", why) | ("gone")
    launcher.stop(handle)

Both run the same `cheems train --recipe R --set model=... --set train_files=[DATASET] --set out_dir=OUT`
(`train_args`); the trainer writes OUT/metrics.jsonl, checkpoints and OUT/model, which the training
service reads from the same path (a shared volume in a cluster). "gone" means the run is no longer
there and how it ended is unknown (a process re-attached after a restart, a deleted Job): the
service then looks for the exported model, or relaunches, resuming from the latest checkpoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from cheems.errors import Unavailable

LOG = "train.log"  # OUT/train.log: the local launcher's process output
RESERVED = ("train_files", "out_dir")  # set by the service: a request may not override them


class LaunchError(Unavailable):
    """The launcher could not start the run (the Kubernetes API refused the Job, the process did not start)."""

    reason = "launch_failed"


@dataclass(frozen=True)
class LaunchSpec:
    training_id: str
    recipe: str  # trainer.recipes name
    train_file: str  # the dataset's file
    out_dir: str
    model: str = ""  # base model directory; empty = the recipe's
    overrides: Mapping[str, str] = field(default_factory=dict)  # TrainConfig fields, applied last
    nproc: int = 1  # processes per node (one per GPU)


Phase = Literal["running", "succeeded", "failed", "gone"]


@dataclass(frozen=True)
class Status:
    phase: Phase
    error: str = ""  # why, when failed


def set_args(spec: LaunchSpec) -> list[str]:
    """The `--set key=value` pairs of the run: the service's own first, the request's overrides after."""
    pairs = [f"train_files={json.dumps([spec.train_file])}", f"out_dir={spec.out_dir}", "progress=false"]
    if spec.model:
        pairs.insert(0, f"model={spec.model}")
    pairs += [f"{k}={v}" for k, v in spec.overrides.items()]
    return [a for kv in pairs for a in ("--set", kv)]


def run_env(env: list[dict[str, str]] | None, spec: LaunchSpec) -> list[dict[str, str]]:
    """A run's container `env` list: `CHEEMS_TRAINING_ID` set to the training's id, so every line its ranks log
    carries it (`trainer.report`), and the service's own `CHEEMS_LOG_FORMAT` when it has one, so the run logs as the
    service does; earlier values of either replaced."""
    from services.observe.logs import LOG_FORMAT_ENV
    from trainer.report import TRAINING_ID_ENV

    given = {TRAINING_ID_ENV: spec.training_id}
    if os.environ.get(LOG_FORMAT_ENV):
        given[LOG_FORMAT_ENV] = os.environ[LOG_FORMAT_ENV]
    kept = [e for e in env or [] if e.get("name") not in given]
    return [*kept, *({"name": k, "value": v} for k, v in given.items())]


def train_args(spec: LaunchSpec) -> list[str]:
    """`cheems` arguments of a one-node run."""
    return ["train", "--recipe", spec.recipe, "--nproc", str(spec.nproc), *set_args(spec)]


class Launcher(Protocol):
    kind: str  # "local" | "kubernetes" (the store's Training.launcher)

    def start(self, spec: LaunchSpec) -> str: ...

    def status(self, handle: str, out_dir: str) -> Status: ...

    def stop(self, handle: str) -> None: ...
