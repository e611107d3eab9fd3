"""The adapter folder (trainer.adapters.files): the files peft's save_pretrained writes, under its names, loadable
by PeftModel.from_pretrained over the base checkpoint with the trained model's rewards; replaced whole."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.trainer.adapters.lora import lora_model, rewards
from trainer.adapters import files
from trainer.adapters.files import CONFIG, WEIGHTS, export_adapter
from trainer.distributed import World

ONE = World(0, 1, 0, torch.device("cpu"))


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def wrapped(tiny: Path) -> tuple[Any, Any]:
    return lora_model(tiny, seed=5)


def test_the_folder_is_what_peft_writes_and_loads_over_the_base_with_the_same_rewards(
    tiny: Path, wrapped: tuple[Any, Any], tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    peft_model, _ = wrapped
    base = peft_model.base_model.model
    out = export_adapter(base, tmp_path / "adapter", ONE, str(tiny))
    assert out == tmp_path / "adapter" and sorted(p.name for p in out.iterdir()) == [CONFIG, WEIGHTS]
    peft_model.save_pretrained(tmp_path / "peft")  # peft's own, in one process
    ours, theirs = load_file(out / WEIGHTS), load_file(tmp_path / "peft" / WEIGHTS)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    config, peft_config = (json.loads((d / CONFIG).read_text()) for d in (out, tmp_path / "peft"))
    assert config["target_modules"] == sorted(peft_config.pop("target_modules"))  # peft writes a set's order
    assert {k: v for k, v in config.items() if k != "target_modules"} == peft_config
    assert config["base_model_name_or_path"] == str(tiny)
    plain = AutoModelForSequenceClassification.from_pretrained(tiny, num_labels=1, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(plain, out)
    assert rewards(loaded.base_model.model) == pytest.approx(rewards(base), abs=1e-5)


def test_a_failed_export_leaves_the_previous_folder_whole(
    tiny: Path, wrapped: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = wrapped[0].base_model.model
    out = export_adapter(base, tmp_path / "adapter", ONE, str(tiny))
    assert out is not None
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "save_file", full)
    with pytest.raises(OSError, match="No space left"):
        export_adapter(base, out, ONE, "elsewhere")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]  # no staging folder left beside it


def test_a_model_without_an_adapter_is_refused_in_one_line(tiny: Path, tmp_path: Path) -> None:
    from cheems.model import load_model

    with pytest.raises(ValueError, match="carries no peft adapter"):
        export_adapter(load_model(tiny)[0], tmp_path / "adapter", ONE)
