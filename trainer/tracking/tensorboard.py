"""TensorBoard: event files in OUT/tensorboard, written by torch's SummaryWriter (the `tensorboard` package).

The run's id is its log directory (`tensorboard --logdir OUT/tensorboard`, or a folder above several runs'). A
resumed run writes a new event file in the same directory, purging the steps after its checkpoint, so a chart has
each step once. Parameters go in as a text table (TEXT tab) and as hyperparameters (HPARAMS tab).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cheems.extras import MissingExtra

FOLDER = "tensorboard"  # under the run's out_dir


class TensorBoardRun:
    name = "tensorboard"

    def __init__(self, log_dir: Path, first_step: int = 1) -> None:
        check_installed()
        from torch.utils.tensorboard import SummaryWriter

        log_dir.mkdir(parents=True, exist_ok=True)
        self.resumed = first_step > 1  # its parameters are in the directory's first event file
        self.writer = SummaryWriter(str(log_dir), purge_step=first_step if self.resumed else None)
        self.id = str(log_dir.resolve())

    def log_params(self, params: dict[str, str]) -> None:
        from torch.utils.tensorboard.summary import hparams

        rows = "\n".join(f"| {k} | {v.replace('|', '&#124;')} |" for k, v in sorted(params.items()))
        self.writer.add_text("params", "| parameter | value |\n| --- | --- |\n" + rows, 0)
        writer = self.writer._get_file_writer()
        for summary in hparams(params, {"train/loss": 0.0, "eval/overall": 0.0}):  # metric names only
            writer.add_summary(summary)

    def log(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        """One event a step holding all its scalars (add_scalar would write one event each), queued for the
        writer's own thread."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        writer = self.writer._get_file_writer()
        for step, scalars in steps:
            values = [Summary.Value(tag=name, simple_value=value) for name, value in scalars.items()]
            writer.add_summary(Summary(value=values), step)

    def close(self, failed: bool = False) -> None:
        self.writer.close()


def check_installed() -> None:
    """MissingExtra when the tensorboard package is not here (a host running the trainer from PYTHONPATH)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise MissingExtra(
            "TensorBoard reports (report_to=tensorboard, the default) need tensorboard, which is not "
            "installed: --set report_to=none (metrics.jsonl is written either way), or pip install tensorboard"
        )
