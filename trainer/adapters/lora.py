"""LoRA reward models: the loaded sequence-classification model given peft's adapters, in place.

    base = attach(base, config)          # the same transformers model, now with LoRA layers; base frozen
    lora_config(config, base)            # the peft.LoraConfig it was given (for adapter_config.json)

peft injects its layers into the model it wraps, so the transformers model the trainer holds (`base`) stays the
model that runs: DDP, FSDP2, the reward hooks (`cheems.forward`), the evaluation and the export keep taking it.
The adapters go on `lora_targets` (module names, matched as peft matches them: the whole name or its last
parts), by default every linear of the decoder (`base.base_model`); never on the reward head, which is trained
whole as peft's `modules_to_save` (the sequence-classification task type): its trainable copy is what
`cheems.model.head_of` returns and what runs. The head is initialised before (`load_model` gives a chat model's
checkpoint a fresh one), so the copy starts from it.

`lora_A` starts as peft's default draws it (Kaiming-uniform, a = sqrt(5); `lora_B` zero, so the model starts as
the base), but from a generator seeded by the run's seed and the parameter's name (`fresh_adapter`): a whole
model and an FSDP2 one built on the meta device and filled shard by shard start from the same adapters.
"""

from __future__ import annotations

import logging
import math
import zlib
from typing import Any

import torch
from torch import nn

from cheems.errors import ConfigError
from cheems.model import head_of
from trainer.config import TrainConfig

log = logging.getLogger(__name__)
ADAPTER = "default"  # peft's name for the one adapter a run trains
BASE, ORIGINAL, SAVED = "base_layer", "original_module", "modules_to_save"  # where peft puts the wrapped module
# what peft adds to a wrapped module's parameter names, removed to find the name a plain checkpoint stores
WRAPPED = (f".{BASE}", f".{ORIGINAL}", f".{SAVED}.{ADAPTER}")


def lora_config(config: TrainConfig, base: nn.Module) -> Any:
    """The peft.LoraConfig of this run over `base` (before or after `attach`): rank, alpha (0 = twice the rank),
    dropout, the target module names, and the head in `modules_to_save`."""
    from peft import LoraConfig, TaskType

    return LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=config.lora_rank,
        lora_alpha=_alpha(config.lora_scale_alpha),
        lora_dropout=config.lora_dropout,
        target_modules=checked_targets(base, config.lora_targets),
        modules_to_save=[head_name(base)],
        bias="none",
    )


def _alpha(value: float) -> Any:
    """lora_alpha as peft's config types it (an int) when it is whole; a fraction stays one (the scale divides)."""
    return int(value) if value.is_integer() else value


def attach(base: Any, config: TrainConfig) -> Any:
    """`base` with LoRA layers on its targets and its head's trainable copy (float32, whatever the base's dtype),
    every other parameter frozen; returns `base` itself. Works on a model on the meta device (FSDP2 fills it
    after sharding, `fresh_adapter` giving the adapters' values)."""
    from peft import get_peft_model

    lora = lora_config(config, base)
    wrapped = get_peft_model(base, lora, autocast_adapter_dtype=True)  # adapters in float32 over a bf16 base
    if wrapped.base_model.model is not base:
        raise ConfigError(f"peft wrapped a copy of {type(base).__name__}, not the model itself")
    head_of(base).float()
    if not any(p.is_meta for p in base.parameters()):
        init_adapters(base, config.seed)
    trainable, total = count(base)
    log.info(
        "LoRA r=%d, alpha=%g, dropout=%g, targets=%s, head %s trained whole: trainable %s of %s parameters (%.3f%%)",
        config.lora_rank,
        config.lora_scale_alpha,
        config.lora_dropout,
        ",".join(sorted(lora.target_modules)),
        head_name(base),
        f"{trainable:,}",
        f"{total:,}",
        100.0 * trainable / max(1, total),
    )
    return base


def count(model: nn.Module) -> tuple[int, int]:
    """(trainable parameters, all parameters), each counted once (a 4-bit base's packed storage as stored)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def head_name(base: nn.Module) -> str:
    """The attribute holding the reward head (`score` in Qwen/Llama, `classifier` elsewhere)."""
    for name in ("score", "classifier"):
        if getattr(base, name, None) is not None:
            return name
    raise ConfigError(f"{type(base).__name__} has no reward head (score/classifier) to train whole")


def decoder_linears(base: Any) -> list[str]:
    """Full names (in `base`) of the decoder's linear layers, the ones LoRA wraps counted as their layer."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    decoder = base.base_model
    prefix = next(name for name, module in base.named_modules() if module is decoder)
    found, inside = [], "\0"
    for name, module in decoder.named_modules():
        if name.startswith(inside):
            continue  # a LoRA layer's own linears (base_layer, lora_A, lora_B)
        if isinstance(module, BaseTunerLayer | nn.Linear):
            found.append(f"{prefix}.{name}" if prefix else name)
        if isinstance(module, BaseTunerLayer):
            inside = f"{name}."
    return found


def checked_targets(base: nn.Module, targets: list[str]) -> list[str]:
    """`targets` (default: the last part of every decoder linear's name: q_proj, ..., down_proj), each checked to
    match a linear of the decoder and not the head, as peft matches (the whole name or its last parts)."""
    linears = decoder_linears(base)
    if not targets:
        return sorted({name.rsplit(".", 1)[-1] for name in linears})
    head, known = head_name(base), sorted({name.rsplit(".", 1)[-1] for name in linears})
    for target in targets:
        if target == head or head.endswith(f".{target}"):
            raise ConfigError(f"lora_targets: {target!r} is the reward head, which is trained whole (no adapter)")
        if not any(name == target or name.endswith(f".{target}") for name in linears):
            raise ConfigError(f"lora_targets: {target!r} names no linear layer of the decoder (its names: {known})")
    return list(targets)


def is_adapter(name: str) -> bool:
    """Whether a parameter name is a LoRA adapter's (not in any plain checkpoint: `fresh_adapter` makes it)."""
    return ".lora_A." in name or ".lora_B." in name


def plain_name(name: str) -> str:
    """The name a plain checkpoint stores a wrapped parameter under (q_proj.base_layer.weight -> q_proj.weight,
    score.modules_to_save.default.weight and score.original_module.weight -> score.weight)."""
    for part in WRAPPED:
        name = name.replace(part, "")
    return name


def fresh_adapter(name: str, shape: torch.Size | tuple[int, ...], seed: int) -> torch.Tensor:
    """An adapter parameter as a run starts it, a full float32 CPU tensor: lora_B zero; lora_A Kaiming-uniform
    (a = sqrt(5), peft's default) drawn from a generator seeded by `seed` and `name`."""
    tensor = torch.zeros(shape, dtype=torch.float32)
    if ".lora_A." in name:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        nn.init.kaiming_uniform_(tensor, a=math.sqrt(5), generator=generator)
    return tensor


def init_adapters(model: nn.Module, seed: int) -> None:
    """Every adapter parameter of a materialised (unsharded) model set to `fresh_adapter`'s value."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if is_adapter(name):
                param.copy_(fresh_adapter(name, param.shape, seed).to(param.dtype))


def base_dtype(config: TrainConfig, device: torch.device) -> torch.dtype:
    """The dtype the frozen base is built in: bfloat16 for adapters on CUDA with bf16 (half the memory of
    float32, and nothing of it is updated), float32 otherwise (full fine-tuning keeps float32 master weights;
    the CPU runs float32)."""
    return torch.bfloat16 if config.adapters and config.bf16 and device.type == "cuda" else torch.float32
