"""Checkpoints that resume exactly: model, optimizer, scheduler, sampler position and RNG.

Layout: OUT/checkpoints/step-00000042/. `position.json` is written last, after every rank has written its part
and rank 0 has synced the folder to disk, and atomically (`trainer.weights.durable.write_atomic`), so a
directory without it is an interrupted save and is ignored; one whose `position.json` does not parse (torn by a
save before writes were atomic, or a damaged disk) is skipped by `latest` with a warning. A save into a folder
that holds a checkpoint already removes its `position.json` first: incomplete until rewritten whole.

Two formats, recorded in `position.json`:

- full (DDP and one process): {model.safetensors, config.json, tokenizer files, trainer_state.pt}; rank 0
  gathers the whole model and optimizer state and writes them; the directory loads as a Hugging Face model.
- sharded (FSDP, `fsdp=True` under torchrun): `torch.distributed.checkpoint` files, each rank writing its own
  shards of the model and optimizer state (`__0_0.distcp`, `__1_0.distcp`, ... and `.metadata`), so no rank
  ever holds the whole state; plus config.json, the tokenizer and trainer_state.pt (scheduler and RNG).

A model with frozen parameters (adapters over a frozen base: `trainer.adapters`) saves its trainable state only,
in either format: `torch.distributed.checkpoint.state_dict` with `ignore_frozen_params` (the adapters, the head's
trained copy and their optimizer state; the base comes from `config.model` again), the full format's weights in
`trainable.safetensors`. `position.json` records which (`weights`: all or trainable), and a run resumes only its
own kind.

A run resumes only the format it writes (a checkpoint without a format is a full one, as all were before
sharded ones); `trainer_state.pt` is read with `weights_only=True` (no arbitrary pickle).
"""

from __future__ import annotations

import json
import logging
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

from cheems.errors import ConfigError
from cheems.model import save_model
from trainer.distributed import World, barrier
from trainer.weights.durable import sync_folder, sync_tree, write_atomic

log = logging.getLogger(__name__)
POSITION = "position.json"
TRAINER_STATE = "trainer_state.pt"
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
FORMATS = {False: "full", True: "sharded"}  # by `sharded`: what a run writes and resumes
TRAINABLE = "trainable.safetensors"  # the full format's weights when the model has frozen parameters
WEIGHTS = {False: "all", True: "trainable"}  # by `frozen_in`: what a checkpoint holds


def checkpoint_dir(out_dir: str | Path, step: int) -> Path:
    return Path(out_dir) / "checkpoints" / f"step-{step:08d}"


def latest(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint: the newest whose `position.json` reads as a JSON object (a torn one is
    skipped with a warning, and the one before it taken)."""
    marked = (Path(out_dir) / "checkpoints").glob(f"step-*/{POSITION}")
    for directory in sorted((p.parent for p in marked), reverse=True):
        if _readable(directory / POSITION):
            return directory
        log.warning("%s: its %s does not parse: skipped, resuming from an earlier checkpoint", directory, POSITION)
    return None


def _readable(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def save(
    directory: Path,
    model: Any,
    base: Any,
    tokenizer: Any,
    optimizer: Any,
    scheduler: Any,
    position: dict[str, Any],
    world: World,
    sharded: bool = False,
) -> None:
    """Every rank calls this. Full: rank 0 gathers and writes; sharded: each rank writes its shards."""
    if world.is_main and (directory / POSITION).exists():  # written again: incomplete until its new position is
        (directory / POSITION).unlink()
        sync_folder(directory)
    frozen = frozen_in(model)
    if sharded:
        _save_sharded(directory, model, base, tokenizer, optimizer, world)
        extra: dict[str, Any] = {}
    else:
        model_state = get_model_state_dict(model, options=_options(frozen, full=True))
        extra = {"optimizer": get_optimizer_state_dict(model, optimizer, options=FULL)}
        if world.is_main and frozen:
            _save_trainable(directory, dict(model_state), base, tokenizer)
        elif world.is_main:
            save_model(base, tokenizer, directory, state_dict=dict(model_state))
    if world.is_main:
        torch.save({**extra, "scheduler": scheduler.state_dict(), "rng": _rng_state()}, directory / TRAINER_STATE)
    barrier(world)  # every rank's part is on disk before the position marks the checkpoint complete
    if world.is_main:
        sync_tree(directory)  # every part on disk before the marker that says the checkpoint is whole
        marked = {**position, "format": FORMATS[sharded], "weights": WEIGHTS[frozen]}
        write_atomic(directory / POSITION, json.dumps(marked) + "\n")
    barrier(world)


def load(directory: Path, model: Any, optimizer: Any, scheduler: Any, sharded: bool = False) -> dict[str, Any]:
    """Restore everything saved by `save`; returns the sampler position (and the batching it counts in)."""
    position: dict[str, Any] = json.loads((directory / POSITION).read_text(encoding="utf-8"))
    saved = position.pop("format", FORMATS[False])
    if saved != FORMATS[sharded]:
        raise ConfigError(
            f"{directory} is a {saved} checkpoint and this run (fsdp {'on' if sharded else 'off'} under torchrun) "
            f"resumes {FORMATS[sharded]} ones: resume with fsdp={str(saved == FORMATS[True]).lower()}, "
            "or train into a new out_dir"
        )
    frozen = frozen_in(model)
    _check_weights(directory, position.pop("weights", WEIGHTS[False]), frozen)
    state = torch.load(directory / TRAINER_STATE, weights_only=True)
    if sharded:
        _load_sharded(directory, model, optimizer)
    else:
        weights: dict[str, Any] = {}
        for file in sorted(directory.glob("*.safetensors")):
            weights.update(load_file(file))
        if frozen:
            _check_trainable(directory, weights, model)
        set_model_state_dict(model, weights, options=_options(frozen, full=True, strict=not frozen))
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True))
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(_as_tuple(state["rng"]["python"]))
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["rng"]["cuda"])
    return position


def _save_sharded(directory: Path, model: Any, base: Any, tokenizer: Any, optimizer: Any, world: World) -> None:
    import torch.distributed.checkpoint as dcp

    if world.is_main:  # what the weights are, for whoever converts the shards (dcp_to_torch_save)
        directory.mkdir(parents=True, exist_ok=True)
        base.config.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    barrier(world)
    dcp.save(_sharded_state(model, optimizer), checkpoint_id=directory)


def _load_sharded(directory: Path, model: Any, optimizer: Any) -> None:
    import torch.distributed.checkpoint as dcp

    state = _sharded_state(model, optimizer)
    dcp.load(state, checkpoint_id=directory)  # each rank reads its own shards into `state`, in place
    frozen = frozen_in(model)
    set_model_state_dict(model, state["model"], options=_options(frozen, strict=not frozen))
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def _sharded_state(model: Any, optimizer: Any) -> dict[str, Any]:
    """Model and optimizer state as each rank holds it (DTensor shards), the trainable part of a model with frozen
    parameters: what dcp writes and reads."""
    model_state = get_model_state_dict(model, options=_options(frozen_in(model)))
    return {"model": model_state, "optimizer": get_optimizer_state_dict(model, optimizer)}


def frozen_in(model: Any) -> bool:
    """Whether `model` has frozen parameters (adapters over a frozen base): its checkpoints hold the rest only."""
    return any(not p.requires_grad for p in model.parameters())


def _options(frozen: bool, full: bool = False, strict: bool = True) -> StateDictOptions:
    """State dict options: a whole state on rank 0's CPU (`full`) or each rank's shards; frozen parameters left
    out when `frozen` (and, loading, not asked for: `strict` off)."""
    return StateDictOptions(full_state_dict=full, cpu_offload=full, ignore_frozen_params=frozen, strict=strict)


def _save_trainable(directory: Path, state: dict[str, Any], base: Any, tokenizer: Any) -> None:
    """The full format's trainable weights (`trainable.safetensors`), with the model's config and tokenizer."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, directory / TRAINABLE)
    base.config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _check_weights(directory: Path, saved: str, frozen: bool) -> None:
    """Refuse a checkpoint holding the other kind of weights (all of them, or the trainable ones)."""
    if saved != WEIGHTS[frozen]:
        mode = "adapters (lora_rank > 0)" if saved == WEIGHTS[True] else "full fine-tuning (lora_rank=0)"
        raise ConfigError(
            f"{directory} holds {saved} weights of a run with {mode}; this run holds {WEIGHTS[frozen]}: resume with "
            "the run's own lora_rank, or train into a new out_dir"
        )


def _check_trainable(directory: Path, weights: dict[str, Any], model: Any) -> None:
    """Refuse trainable weights of other names than the model's (other lora_targets): loaded with strict off,
    they would be skipped silently."""
    expected = set(get_model_state_dict(model, options=_options(True)))
    if set(weights) != expected:
        odd = sorted(set(weights) ^ expected)[:3]
        raise ConfigError(
            f"{directory}: its trainable weights are not this model's ({', '.join(odd)}, ...): resume with the same "
            "lora_rank and lora_targets, or train into a new out_dir"
        )


def _rng_state() -> dict[str, Any]:
    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state()
    return rng


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
