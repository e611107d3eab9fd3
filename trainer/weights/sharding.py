"""FSDP2 for a model larger than one rank: built on the meta device, sharded, then filled shard by shard.

    model, tokenizer = load_sharded(config, world)   # every rank, under torchrun with fsdp=True

No rank ever holds the whole model. The model is built from its config on the meta device (no memory), each
decoder layer and then the root are `fully_shard`ed (a `MixedPrecisionPolicy`: bfloat16 parameters for the
forward and backward, float32 gradient reduction, when `bf16` is set on CUDA; float32 elsewhere; a
`CPUOffloadPolicy` with `cpu_offload`), the shards are materialised on the device (`to_empty`), and each rank
reads from the checkpoint's safetensors files only the rows of each tensor it owns: plain reads at the offsets
the file's header gives, 64 MiB at a time, no communication and no mapping, so a load adds one chunk of host
memory to the shards themselves. Each stored tensor's shape and dtype are checked against the model's first,
and every read for its length (`trainer.weights.stored`): a file cut short or a mismatched checkpoint is
refused, never loaded as zeros or a neighbour's bytes. Every rank needs the checkpoint's files (a shared
filesystem, or a copy per node). Buffers that are not saved (the rotary embedding's `inv_freq`) are recomputed
by building their module again on the CPU. A chat model's checkpoint has no reward head: it gets the head
`load_model` would give it (`cheems.model.fresh_head`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cheems.errors import ModelError
from cheems.model import empty_model, fresh_head, head_of
from trainer.adapters.lora import ADAPTER, attach, base_dtype, fresh_adapter, is_adapter, plain_name
from trainer.config import TrainConfig
from trainer.distributed import World
from trainer.weights.stored import Stored, check_target, read_rows, stored_tensors

log = logging.getLogger(__name__)
ADAPTER_LINEARS = (f".lora_A.{ADAPTER}", f".lora_B.{ADAPTER}")  # the linears inside peft's per-adapter dicts


def prepare(base: Any, config: TrainConfig) -> None:
    """What both the DDP and the FSDP paths do to the transformers model first: activation checkpointing (each
    decoder layer's activations recomputed in the backward) and compilation, in place."""
    if config.gradient_checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        base.config.use_cache = False
    if config.compile:
        base.compile()  # in place: DDP, FSDP and the reward hooks keep seeing the same module


def loading(config: TrainConfig, world: World) -> dict[str, Any]:
    """How a training run builds its model, whole (`cheems.model.load_model`) or on the meta device (`empty_model`):
    the base's dtype (bf16 under adapters on CUDA), remote code, the attention kernel, the device it runs on."""
    return {
        "dtype": base_dtype(config, world.device),
        "trust_remote_code": config.trust_remote_code,
        "attn_implementation": config.attn_implementation,
        "device": str(world.device),
        "training": True,
    }


def load_sharded(config: TrainConfig, world: World) -> tuple[Any, Any]:
    """(the sharded model on `world.device`, its tokenizer): every rank calls it, each reads only its rows."""
    base, tokenizer = empty_model(config.model, **loading(config, world))
    if config.adapters:
        attach(base, config)  # on the meta device: the adapters' values come with the weights (`load_weights`)
    prepare(base, config)
    shard(base, config, world)
    materialise(base, Path(config.model), config.seed, world.device, "cpu" if config.cpu_offload else world.device)
    return base, tokenizer


def materialise(model: nn.Module, directory: Path, seed: int, device: torch.device, storage: Any = None) -> None:
    """A model on the meta device (sharded or whole) given memory on `storage` (default `device`) and its weights
    from `directory`; its unsaved buffers on `device`, where the forward runs."""
    model.to_empty(device=storage or device)
    restore_buffers(model, device)
    with torch.no_grad():
        load_weights(model, directory, seed)


def policies(config: TrainConfig, world: World) -> dict[str, Any]:
    """`fully_shard`'s keyword arguments: the mixed-precision policy and, with `cpu_offload`, the offload one."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    half = config.bf16 and world.device.type == "cuda"
    precision = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if half else torch.float32,
        reduce_dtype=torch.float32,
    )
    kwargs: dict[str, Any] = {"mp_policy": precision}
    if config.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    return kwargs


def shard(base: Any, config: TrainConfig, world: World) -> None:
    """`fully_shard` each decoder layer (its parameters gathered only while it runs), then the root (the input
    embedding, the final norm and the head). The embedding as a unit of its own measured no lower a peak on the
    CPU (bench/fsdp_memory_bench.py: 3.47 GB against 2.95 GB a rank). With adapters, each layer's LoRA modules
    are one group of their own before it, and the head's trained copy one before the root: the trainable
    parameters of a group must share a dtype, and theirs are float32 beside a frozen bf16 base on CUDA."""
    from torch.distributed.fsdp import fully_shard

    kwargs = policies(config, world)
    for layer in base.base_model.layers:
        if adapters := [m for n, m in layer.named_modules() if n.endswith(ADAPTER_LINEARS)]:  # what peft calls
            fully_shard(adapters, **kwargs)
        fully_shard(layer, **kwargs)
    if config.adapters:
        fully_shard(head_of(base), **kwargs)
    fully_shard(base, **kwargs)


def restore_buffers(model: nn.Module, device: torch.device) -> None:
    """Recompute the buffers a checkpoint does not hold (after `to_empty` they are garbage): each module holding
    one is built again from its config on the CPU (a rotary embedding: its `inv_freq` from rope_theta and the
    head size) and its unsaved buffers copied over."""
    for name, module in model.named_modules():
        unsaved = [b for b in module._non_persistent_buffers_set if module._buffers.get(b) is not None]
        if not unsaved:
            continue
        if not hasattr(module, "config") or any(True for _ in module.parameters()):
            what = f"{name} ({type(module).__name__}) has unsaved buffers {unsaved}"
            raise ModelError(f"{what}: only a parameterless module with a config can be rebuilt to recompute them")
        with torch.device("cpu"):
            fresh = type(module)(module.config)
        for buffer in unsaved:
            module._buffers[buffer] = fresh._buffers[buffer].to(device)


def load_weights(model: nn.Module, directory: Path, seed: int) -> None:
    """Fill every parameter and saved buffer of `model` (sharded DTensors or plain tensors) from the safetensors
    files in `directory`, each rank reading only its rows; a missing reward head gets `fresh_head(model, seed)`.
    Refuses a checkpoint missing anything else, or storing a tensor of another shape or kind of dtype than the
    model's, or cut short (`trainer.weights.stored`)."""
    targets = model.state_dict(keep_vars=True)
    plain = {n: plain_name(n) for n in targets if not is_adapter(n)}  # adapters: `fresh_adapter`, in no file
    heads = {plain[n] for n, t in targets.items() if any(t is p for p in head_of(model).parameters())}
    head = {n for n, key in plain.items() if key in heads}  # with LoRA: the original and the trained copy
    where = _locate(sorted(directory.glob("*.safetensors")), plain, getattr(model, "base_model_prefix", ""))
    missing = sorted(set(plain) - set(where))
    if set(missing) - head:
        shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
        raise ModelError(f"{directory}: weights the model needs are not in its safetensors files ({shown})")
    for name, stored in where.items():  # every mismatch refused before a byte is read
        check_target(stored, targets[name])
    for name, tensor in targets.items():
        local, dim, start, stop = local_part(tensor)
        if name in where:
            read_rows(local, where[name], dim, start, stop)
        elif is_adapter(name):
            local.copy_(fresh_adapter(name, tensor.shape, seed).narrow(dim, start, stop - start))
        else:
            local.copy_(_missing_head(model, name, seed).narrow(dim, start, stop - start))
    if missing:
        log.info("%s has no reward head (%s): initialised as a missing head is", directory, ", ".join(missing))


def local_part(tensor: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """(this rank's local tensor, the dimension it is cut along, its first and end index there): a DTensor
    sharded along one dimension of a 1-D mesh (FSDP2: torch.chunk's split, the last ranks may hold fewer rows),
    or a whole tensor."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    if not isinstance(tensor, DTensor):
        return tensor.data, 0, 0, tensor.shape[0] if tensor.dim() else 0
    placements = tensor.placements
    local = tensor.to_local()
    if all(isinstance(p, Replicate) for p in placements):
        return local, 0, 0, tensor.shape[0] if tensor.dim() else 0
    if len(placements) != 1 or not isinstance(placements[0], Shard):
        raise ModelError(f"a parameter placed {placements} cannot be loaded: one Shard on a 1-D mesh expected")
    dim, size = placements[0].dim, tensor.device_mesh.size()
    chunk = -(-tensor.shape[dim] // size)
    start = min(chunk * tensor.device_mesh.get_local_rank(), tensor.shape[dim])
    return local, dim, start, start + local.shape[dim]


def _locate(files: list[Path], names: dict[str, str], prefix: str) -> dict[str, Stored]:
    """Model name -> where its tensor is stored, from the files' headers, by `names` (model name -> stored name:
    peft's wrapped names stored plain); a bare backbone's keys lack the model's prefix (`model.`)."""
    readers: dict[str, list[str]] = {}
    for name, key in names.items():
        readers.setdefault(key, []).append(name)
    where: dict[str, Stored] = {}
    for file in files:
        for key, stored in stored_tensors(file).items():
            for plain in (key, f"{prefix}.{key}") if prefix else (key,):
                where.update(dict.fromkeys(readers.get(plain, ()), stored))
    return where


def _missing_head(model: nn.Module, name: str, seed: int) -> torch.Tensor:
    """A head weight as `load_model` makes it up (its bias, if any, zero)."""
    if name.endswith("weight"):
        return fresh_head(model, seed)
    return torch.zeros(head_of(model).out_features)
