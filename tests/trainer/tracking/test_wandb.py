"""W&B is an optional backend: without its package (not installed by `make setup`), asking for it is refused
before anything loads, in one line naming the package and the extra."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cheems.extras import MissingExtra
from trainer.config import TrainConfig
from trainer.distributed import World
from trainer.tracking.session import check_installed, start_tracking


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_report_to_wandb_without_wandb_names_the_package_and_the_extra(tmp_path: Path) -> None:
    import torch

    config = TrainConfig(out_dir=str(tmp_path / "run"), report_to=["tensorboard", "wandb"])
    with pytest.raises(MissingExtra) as caught:
        check_installed(config.report_to)  # what the trainer asks first, before the model loads
    with pytest.raises(MissingExtra) as opening:
        start_tracking(config, World(0, 1, 0, torch.device("cpu")))
    message = str(caught.value)
    assert str(opening.value) == message
    assert "\n" not in message
    assert message.startswith("Weights & Biases reports (report_to=wandb) needs wandb (the `wandb` extra)")
    assert message.endswith("--set report_to without wandb, or pip install 'cheems[wandb]'")


def test_other_ranks_report_nothing(tmp_path: Path) -> None:
    import torch

    config = TrainConfig(out_dir=str(tmp_path / "run"), report_to=["tensorboard", "wandb"])
    with start_tracking(config, World(1, 2, 1, torch.device("cpu"))) as tracking:
        assert tracking.ids == {} and tracking.runs == []
    assert not (tmp_path / "run").exists()
