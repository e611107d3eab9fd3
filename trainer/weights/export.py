"""The trained model as a Hugging Face directory of safetensors shards, gathered one tensor at a time.

    export_model(base, tokenizer, OUT / "model", metadata, world, max_shard_bytes=5_000_000_000)
    export_model(base, ..., tensors=merged_tensors(base))   # LoRA: the adapters merged in (trainer.adapters)

Every rank walks the model's state dict in the same order; a sharded (FSDP2 DTensor) tensor is gathered whole
(`full_tensor`, every rank takes part) and rank 0 adds it to the shard it is filling, writing the shard out
when the next tensor would not fit: host memory holds about one shard, never the whole model. A model that
fits one shard is one `model.safetensors`, as `save_pretrained` writes it; a larger one is
`model-00001-of-0000N.safetensors`... with `model.safetensors.index.json`, the layout transformers, vLLM and
our scorer load. Config, tokenizer, chat template and `cheems_metadata.json` are written as
`cheems.model.save_model` writes them (self-describing, `describe_reward_model`).

An export replaces the folder whole. Rank 0 writes into a sibling folder of its own (`.model.partial-<pid>`
beside `model`: the same filesystem), syncs every file in it to disk, and only then swaps it into place: one
renameat2(RENAME_EXCHANGE) on Linux, so a reader of `model` finds the old folder or the new one, never neither;
where the filesystem cannot exchange, the old folder is renamed aside (`.model.old-<pid>`) and the new one
renamed in. The old model is removed after. Killed at any instant, `model` holds the old complete model or the
new complete one, never a mix of the two nor a half-written folder; the one gap is the fallback's instant between
its renames, when `model` is missing and the old model lies beside it as `.model.old-*`. The next export puts
such an old folder back and removes every leftover `.model.partial-*` and `.model.old-*` before it writes (one
exporter per destination). What the swap cannot give: a reader opening the model's files one by one while it
happens resolves each path when it opens it, so it may get files of both; the training service registers a
model only once its run has ended.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from cheems.model import describe_reward_model, write_metadata
from trainer.distributed import World, barrier
from trainer.weights.durable import exchange, sync_folder, sync_tree

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 5_000_000_000  # transformers' save_pretrained default, "5GB"
PARTIAL, OLD = "partial", "old"  # the kinds of folder an export leaves beside its destination while it runs


class ShardWriter:
    """Tensors in, safetensors shards of at most `max_bytes` out (a tensor larger than that alone in its own)."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_shard_bytes must be >= 1, got {max_bytes}")
        self.directory, self.max_bytes = directory, max_bytes
        self.current: dict[str, torch.Tensor] = {}
        self.current_bytes = 0
        self.written: list[tuple[Path, list[str]]] = []  # each shard's temporary file and tensor names
        self.total_bytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.current and self.current_bytes + size > self.max_bytes:
            self.flush()
        self.current[name] = tensor.detach().to("cpu").contiguous()
        self.current_bytes += size
        self.total_bytes += size

    def flush(self) -> None:
        from safetensors.torch import save_file

        if not self.current:
            return
        path = self.directory / f".shard-{len(self.written):05d}.tmp"
        save_file(self.current, path, metadata={"format": "pt"})
        self.written.append((path, list(self.current)))
        self.current, self.current_bytes = {}, 0

    def finish(self) -> list[Path]:
        """Name the shards (their count known now) and write the index when there are several."""
        self.flush()
        count = len(self.written)
        names = [SINGLE] if count == 1 else [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]
        for (temporary, _), name in zip(self.written, names, strict=True):
            temporary.replace(self.directory / name)
        if count > 1:
            weight_map = {key: name for (_, keys), name in zip(self.written, names, strict=True) for key in keys}
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
            (self.directory / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return [self.directory / n for n in names]


def export_model(
    base: Any,
    tokenizer: Any,
    directory: Path,
    metadata: dict[str, Any] | None,
    world: World,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    tensors: Iterable[tuple[str, torch.Tensor]] | None = None,
) -> Path | None:
    """Every rank calls it (each takes part in gathering the sharded tensors); rank 0 writes the export aside and
    swaps it into `directory`, and returns it; the others wait at the closing barrier until the new model is in
    place, and return None. `tensors`: (name, whole tensor) pairs every rank yields in the same order, gathered
    as they go (default: `base`'s state dict, `gathered`)."""
    target = directory.resolve()  # a link to the models' volume: the swap happens there, the link stays
    staging = begin(target) if world.is_main else None
    try:
        writer = ShardWriter(staging, max_shard_bytes) if staging is not None else None
        for name, whole in gathered(base) if tensors is None else tensors:
            if writer is not None:
                writer.add(name, whole)
            del whole
        if writer is not None and staging is not None:
            writer.finish()
            write_companions(base, tokenizer, staging, metadata)
            publish(staging, target)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    barrier(world)
    return directory if world.is_main else None


def begin(directory: Path) -> Path:
    """A fresh, empty folder beside `directory` to write an export into, once what a killed export left is
    undone (`recover`)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    recover(directory)
    staging = _beside(directory, PARTIAL)
    staging.mkdir()
    return staging


def recover(directory: Path) -> None:
    """Undo what a killed export left beside `directory`: an old model renamed aside with nothing renamed in
    after it goes back; every other leftover (a partial export, an old model not yet removed) goes."""
    pattern = f".{glob.escape(directory.name)}."
    old = sorted(directory.parent.glob(f"{pattern}{OLD}-*"))  # one at most, unless exports overlapped
    if old and not os.path.lexists(directory):
        os.rename(old.pop(), directory)
        sync_folder(directory.parent)
    for leftover in [*old, *directory.parent.glob(f"{pattern}{PARTIAL}-*")]:
        _remove(leftover)


def publish(staging: Path, directory: Path) -> None:
    """Sync the finished export in `staging` to disk, swap it into `directory`, then remove the old model."""
    sync_tree(staging)
    old: Path | None = None
    if not os.path.lexists(directory):
        os.rename(staging, directory)
    elif exchange(staging, directory):
        old = staging  # the old model now lies where the new one was written
    else:
        old = _rename_aside(staging, directory)
    sync_folder(directory.parent)
    if old is not None:
        _remove(old)


def _rename_aside(staging: Path, directory: Path) -> Path:
    """Where the filesystem cannot exchange: the old folder aside, the new one in; the old one's new path."""
    old = _beside(directory, OLD)
    os.rename(directory, old)
    try:
        os.rename(staging, directory)
    except BaseException:
        os.rename(old, directory)
        raise
    return old


def _beside(directory: Path, kind: str) -> Path:
    return directory.with_name(f".{directory.name}.{kind}-{os.getpid()}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def gathered(base: Any) -> Iterable[tuple[str, torch.Tensor]]:
    """(name, whole tensor) of `base`'s state dict, in order, each gathered as it comes (every rank iterates)."""
    for name, tensor in base.state_dict().items():
        yield name, full_tensor(tensor)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor gathered from every rank (a collective), a plain one as it is."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return tensor
    mesh = tensor.device_mesh
    if tensor.device.type != mesh.device_type:  # offloaded to the CPU: gathered on the device
        return DTensor.full_tensor(tensor.to(mesh.device_type))  # type: ignore[arg-type]
    return tensor.full_tensor()


def write_companions(base: Any, tokenizer: Any, directory: Path, metadata: dict[str, Any] | None) -> None:
    """Config, tokenizer and metadata, as `save_pretrained` + `save_model` write them around the weights."""
    describe_reward_model(base.config, tokenizer)
    dtype = next(base.parameters()).dtype
    base.config.dtype = str(dtype).removeprefix("torch.")
    base.config.architectures = [type(base).__name__.removeprefix("FSDP")]  # FSDP2 renames the class
    base.config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if metadata is not None:
        write_metadata(directory, metadata)
