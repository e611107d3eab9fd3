"""The final model's export (trainer.weights.export): safetensors shards and their index, loaded by transformers,
with what save_model writes beside the weights. In one process: the gathered (DTensor) path is in test_train."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cheems.model import load_model, save_model
from trainer.distributed import World
from trainer.weights.export import INDEX, export_model

ONE = World(0, 1, 0, torch.device("cpu"))


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


def test_export_splits_into_shards_transformers_loads_and_writes_what_save_model_writes(
    tiny: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForSequenceClassification

    model, tokenizer = load_model(tiny)
    one = export_model(model, tokenizer, tmp_path / "one", {"steps": 3}, ONE)
    assert one is not None and sorted(p.name for p in one.glob("*.safetensors")) == ["model.safetensors"]
    shards = export_model(model, tokenizer, tmp_path / "shards", {"steps": 3}, ONE, max_shard_bytes=20_000)
    assert shards is not None
    files = sorted(p.name for p in shards.glob("*.safetensors"))
    assert len(files) >= 3 and files[0] == f"model-00001-of-{len(files):05d}.safetensors", files
    index = json.loads((shards / INDEX).read_text())
    assert set(index["weight_map"]) == set(model.state_dict()) and set(index["weight_map"].values()) == set(files)
    sizes = {f: sum(t.numel() * t.element_size() for t in load_file(shards / f).values()) for f in files}
    assert all(size <= 20_000 for f, size in sizes.items() if len(load_file(shards / f)) > 1), sizes
    loaded = AutoModelForSequenceClassification.from_pretrained(shards, use_safetensors=True).eval()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0, msg=name)
    save_model(model, tokenizer, tmp_path / "saved", {"steps": 3})
    companions = sorted(p.name for p in (tmp_path / "saved").iterdir() if p.suffix != ".safetensors")
    assert sorted(p.name for p in shards.iterdir() if p.suffix != ".safetensors" and p.name != INDEX) == companions
    for name in companions:
        assert (shards / name).read_text() == (tmp_path / "saved" / name).read_text(), name
