"""The final model's export (trainer.weights.export): safetensors shards and their index, loaded by transformers,
with what save_model writes beside the weights; replacing an earlier export whole or not at all. In one process:
the gathered (DTensor) path is in test_train."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from safetensors.torch import load_file

from cheems.model import load_model, save_model
from trainer.distributed import World
from trainer.weights import export
from trainer.weights.export import INDEX, export_model

ONE = World(0, 1, 0, torch.device("cpu"))


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def its_tokenizer(tiny: Path) -> Any:
    """The tiny model's tokenizer, loaded once (loading it is most of a load_model)."""
    return load_model(tiny)[1]


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


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def beside(directory: Path) -> list[str]:
    """What else lies in the destination's folder: an export's leftovers."""
    return sorted(p.name for p in directory.parent.iterdir() if p != directory)


def retrained(tiny: Path, tokenizer: Any) -> Any:
    """The tiny model with other weights: a new export differs from the old one in every shard."""
    model, _ = load_model(tiny, tokenizer=tokenizer)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    return model


def assert_loads(directory: Path, model: Any, tokenizer: Any) -> None:
    loaded, _ = load_model(directory, tokenizer=tokenizer)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("fail_at", ["third shard", "metadata"])
def test_an_export_that_fails_midway_leaves_the_previous_model_whole_at_the_destination(
    tiny: Path, its_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: str
) -> None:
    """Never a half-written folder at the destination, even while the export writes; a completed one replaces it."""
    tokenizer = its_tokenizer
    old, _ = load_model(tiny, tokenizer=tokenizer)
    model = export_model(old, tokenizer, tmp_path / "out" / "model", {"steps": 3}, ONE, max_shard_bytes=20_000)
    assert model is not None
    before = files_of(model)
    seen: list[dict[str, bytes]] = []  # the destination at the instant the export failed

    def fail(*args: Any, **kwargs: Any) -> None:
        seen.append(files_of(model))
        raise OSError(errno.ENOSPC, "No space left on device")

    if fail_at == "third shard":
        shards: list[int] = []
        save_file = safetensors.torch.save_file

        def third_fails(*args: Any, **kwargs: Any) -> None:
            shards.append(1)
            (fail if len(shards) == 3 else save_file)(*args, **kwargs)

        monkeypatch.setattr(safetensors.torch, "save_file", third_fails)
    else:  # the last file written before the swap
        monkeypatch.setattr(export, "write_metadata", fail)
    new = retrained(tiny, tokenizer)
    with pytest.raises(OSError, match="No space left"):
        export_model(new, tokenizer, model, {"steps": 6}, ONE, max_shard_bytes=20_000)
    assert len(seen) == 1 and seen[0] == before
    assert files_of(model) == before and beside(model) == []
    assert_loads(model, old, tokenizer)
    monkeypatch.undo()
    assert export_model(new, tokenizer, model, {"steps": 6}, ONE, max_shard_bytes=20_000) == model
    assert files_of(model) != before and beside(model) == []
    assert json.loads((model / "cheems_metadata.json").read_text())["steps"] == 6
    assert_loads(model, new, tokenizer)


def test_without_an_atomic_exchange_a_failed_swap_puts_the_old_model_back(
    tiny: Path, its_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that cannot exchange two folders: the old one is renamed aside, the new one in."""
    monkeypatch.setattr(export, "exchange", lambda a, b: False)
    tokenizer = its_tokenizer
    old, _ = load_model(tiny, tokenizer=tokenizer)
    model = export_model(old, tokenizer, tmp_path / "model", None, ONE)
    assert model is not None
    before = files_of(model)
    rename = os.rename

    def new_one_fails(source: Any, target: Any) -> None:
        if Path(source).name.startswith(".model.partial-"):
            raise OSError(errno.EIO, "Input/output error")
        rename(source, target)

    monkeypatch.setattr(os, "rename", new_one_fails)
    new = retrained(tiny, tokenizer)
    with pytest.raises(OSError, match="Input/output error"):
        export_model(new, tokenizer, model, None, ONE)
    assert files_of(model) == before and beside(model) == []
    monkeypatch.setattr(os, "rename", rename)
    export_model(new, tokenizer, model, None, ONE)
    assert beside(model) == []
    assert_loads(model, new, tokenizer)


def killed(model: Path) -> None:
    """What exports killed at the wrong instants leave: one between the fallback's two renames (the old model
    aside, nothing at the destination), another while it wrote (a partial folder)."""
    os.rename(model, model.with_name(".model.old-4242"))
    partial = model.with_name(".model.partial-4343")
    partial.mkdir()
    (partial / ".shard-00000.tmp").write_bytes(b"half a shard")


def test_what_a_killed_export_left_is_undone_by_the_next_one(
    tiny: Path, its_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next export puts the old model back before anything else and removes the rest: failing itself, it
    leaves the old model; completing, the new one."""
    tokenizer = its_tokenizer
    old, _ = load_model(tiny, tokenizer=tokenizer)
    model = export_model(old, tokenizer, tmp_path / "model", {"steps": 3}, ONE)
    assert model is not None
    before = files_of(model)
    killed(model)

    def fail(*args: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "write_metadata", fail)
    new = retrained(tiny, tokenizer)
    with pytest.raises(OSError, match="No space left"):
        export_model(new, tokenizer, model, {"steps": 6}, ONE)
    assert files_of(model) == before and beside(model) == []
    monkeypatch.undo()
    killed(model)
    export_model(new, tokenizer, model, {"steps": 6}, ONE)
    assert beside(model) == []
    assert_loads(model, new, tokenizer)
