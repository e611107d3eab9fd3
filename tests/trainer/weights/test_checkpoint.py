"""Checkpoints (trainer.weights.checkpoint): a run refuses to resume the other format; a torn position.json is
skipped; a save cut off while it marks the checkpoint complete leaves it incomplete. Saving and resuming both
formats runs end to end in test_train (one process: full; torchrun with FSDP: sharded)."""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from cheems.errors import ConfigError
from cheems.model import load_model
from trainer.distributed import World
from trainer.weights import checkpoint

ONE = World(0, 1, 0, torch.device("cpu"))


def test_a_checkpoint_of_the_other_format_is_refused_before_anything_loads(tmp_path: Path) -> None:
    (tmp_path / checkpoint.POSITION).write_text(json.dumps({"step": 4, "epoch": 0, "batch": 4, "format": "sharded"}))
    with pytest.raises(ConfigError, match=r"is a sharded checkpoint .* resume with fsdp=true") as caught:
        checkpoint.load(tmp_path, None, None, None, sharded=False)
    assert "\n" not in str(caught.value)
    (tmp_path / checkpoint.POSITION).write_text(json.dumps({"step": 4, "epoch": 0, "batch": 4}))  # written before
    with pytest.raises(ConfigError, match=r"is a full checkpoint .* resume with fsdp=false"):
        checkpoint.load(tmp_path, None, None, None, sharded=True)


def mark(out: Path, step: int, text: str) -> Path:
    directory = checkpoint.checkpoint_dir(out, step)
    directory.mkdir(parents=True)
    (directory / checkpoint.POSITION).write_text(text, encoding="utf-8")
    return directory


def test_latest_skips_a_torn_position_and_takes_the_checkpoint_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = mark(tmp_path, 2, json.dumps({"step": 2, "epoch": 0, "batch": 2, "format": "full"}))
    torn = mark(tmp_path, 4, '{"step": 4, "epoch": 0, "ba')
    mark(tmp_path, 6, "")  # a save killed right after the file was created
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        assert checkpoint.latest(tmp_path) == whole
    assert any(str(torn) in r.getMessage() and "does not parse" in r.getMessage() for r in caplog.records)
    (whole / checkpoint.POSITION).write_text("[]", encoding="utf-8")  # JSON, but not a position
    assert checkpoint.latest(tmp_path) is None


@pytest.fixture
def saving(tiny_checkpoint: Callable[..., Path], tokenizer: Any) -> Callable[[Path], None]:
    """`saving(directory)`: a full checkpoint of the tiny model at step 4, saved into `directory`."""
    model, _ = load_model(tiny_checkpoint(), tokenizer=tokenizer)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    position = {"step": 4, "epoch": 0, "batch": 4}
    return lambda directory: checkpoint.save(directory, model, model, tokenizer, optimizer, scheduler, position, ONE)


def test_a_save_cut_off_while_it_writes_its_position_leaves_the_checkpoint_incomplete(
    tmp_path: Path, saving: Callable[[Path], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """position.json is written aside and renamed into place: never half a file that `latest` would pick."""
    directory = checkpoint.checkpoint_dir(tmp_path, 4)
    saving(directory)
    assert checkpoint.latest(tmp_path) == directory
    write = os.write

    def disk_fills_halfway(fd: int, data: Any) -> int:
        if b'"format"' not in bytes(data):
            return write(fd, data)
        write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_fills_halfway)
    with pytest.raises(OSError, match="No space left"):
        saving(directory)  # saved again (its weights rewritten): incomplete until its position is whole
    assert not (directory / checkpoint.POSITION).exists()
    assert [p.name for p in directory.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    assert checkpoint.latest(tmp_path) is None
    monkeypatch.undo()
    saving(directory)
    assert json.loads((directory / checkpoint.POSITION).read_text())["step"] == 4
    assert checkpoint.latest(tmp_path) == directory


def test_a_checkpoint_of_the_other_kind_of_weights_is_refused(
    tmp_path: Path, saving: Callable[[Path], None], tiny_checkpoint: Callable[..., Path], tokenizer: Any
) -> None:
    """Full fine-tuning saves every weight, adapters over a frozen base only the trainable ones: neither run
    resumes the other's (`weights` in position.json), nor adapters of other targets than its own."""
    from trainer.adapters.lora import attach
    from trainer.config import TrainConfig

    full = checkpoint.checkpoint_dir(tmp_path / "full", 4)
    saving(full)

    def adapters(targets: list[str]) -> tuple[Any, Any, Any]:
        model, _ = load_model(tiny_checkpoint(), tokenizer=tokenizer)
        model = attach(model, TrainConfig(lora_rank=2, lora_targets=targets))
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=0.1)
        for param in trainable:  # one step: the optimizer has state to save and restore
            param.grad = torch.zeros_like(param)
        optimizer.step()
        return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    model, optimizer, scheduler = adapters(["q_proj"])
    with pytest.raises(ConfigError, match=r"holds all weights of a run with full fine-tuning .* lora_rank") as caught:
        checkpoint.load(full, model, optimizer, scheduler)
    assert "\n" not in str(caught.value)
    lora = checkpoint.checkpoint_dir(tmp_path / "lora", 4)
    checkpoint.save(lora, model, model, tokenizer, optimizer, scheduler, {"step": 4, "epoch": 0, "batch": 4}, ONE)
    assert [p.name for p in lora.glob("*.safetensors")] == [checkpoint.TRAINABLE]
    plain, _ = load_model(tiny_checkpoint(), tokenizer=tokenizer)
    sgd = torch.optim.SGD(plain.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match=r"holds trainable weights of a run with adapters"):
        checkpoint.load(lora, plain, sgd, torch.optim.lr_scheduler.LambdaLR(sgd, lambda step: 1.0))
    assert checkpoint.load(lora, *adapters(["q_proj"]))["step"] == 4
    with pytest.raises(ConfigError, match=r"its trainable weights are not this model's .* lora_targets"):
        checkpoint.load(lora, *adapters(["v_proj"]))
