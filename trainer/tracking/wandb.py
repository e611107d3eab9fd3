"""Weights & Biases: a W&B run (the `wandb` extra, not installed by `make setup`).

`WANDB_MODE=offline` keeps the run in OUT/wandb for a later `wandb sync`; otherwise wandb's own settings apply
(`WANDB_API_KEY`, `WANDB_ENTITY`, `WANDB_BASE_URL`). The run goes in project `experiment` under `run_name`; a resumed
training (same out_dir) resumes the run it started. The run's id is what the training and its model keep.
"""

from __future__ import annotations

from pathlib import Path

from cheems.extras import need


class WandbRun:
    name = "wandb"

    def __init__(self, project: str, run_name: str, out_dir: Path, previous: str | None = None) -> None:
        need("wandb", instead="--set report_to without wandb")
        import wandb

        out_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project, name=run_name or None, dir=str(out_dir), id=previous, resume="allow" if previous else None
        )
        self.resumed = bool(getattr(self.run, "resumed", False))
        self.id: str = self.run.id

    def log_params(self, params: dict[str, str]) -> None:
        self.run.config.update(params, allow_val_change=True)

    def log(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        for step, scalars in steps:
            self.run.log(scalars, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)
