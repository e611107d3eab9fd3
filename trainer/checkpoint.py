"""Checkpoints that resume exactly: model, optimizer, scheduler, sampler position and RNG.

Layout: OUT/checkpoints/step-00000042/{model.safetensors, config.json, tokenizer files,
trainer_state.pt, position.json}. `position.json` is written last, so a directory without it is an
interrupted save and is ignored. Full (unsharded) state dicts are used, so DDP and FSDP runs save
the same files; `trainer_state.pt` is read with `weights_only=True` (no arbitrary pickle).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from cheems.model import save_model
from trainer.distributed import World, barrier

POSITION = "position.json"
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def checkpoint_dir(out_dir: str | Path, step: int) -> Path:
    return Path(out_dir) / "checkpoints" / f"step-{step:08d}"


def latest(out_dir: str | Path) -> Path | None:
    complete = sorted(p.parent for p in (Path(out_dir) / "checkpoints").glob(f"step-*/{POSITION}"))
    return complete[-1] if complete else None


def save(
    directory: Path,
    model: Any,
    base: Any,
    tokenizer: Any,
    optimizer: Any,
    scheduler: Any,
    position: dict[str, Any],
    world: World,
) -> None:
    """Every rank calls this (FSDP gathers shards); rank 0 writes."""
    model_state = get_model_state_dict(model, options=FULL)
    optim_state = get_optimizer_state_dict(model, optimizer, options=FULL)
    if world.is_main:
        save_model(base, tokenizer, directory, state_dict=dict(model_state))
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        torch.save(
            {"optimizer": optim_state, "scheduler": scheduler.state_dict(), "rng": rng},
            directory / "trainer_state.pt",
        )
        (directory / POSITION).write_text(json.dumps(position) + "\n", encoding="utf-8")
    barrier(world)


def load(directory: Path, model: Any, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Restore everything saved by `save`; returns the sampler position (and the batching it counts in)."""
    weights: dict[str, Any] = {}
    for file in sorted(directory.glob("*.safetensors")):
        weights.update(load_file(file))
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    state = torch.load(directory / "trainer_state.pt", weights_only=True)
    set_optimizer_state_dict(model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True))
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(_as_tuple(state["rng"]["python"]))
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["rng"]["cuda"])
    position: dict[str, Any] = json.loads((directory / POSITION).read_text(encoding="utf-8"))
    return position


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
