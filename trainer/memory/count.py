"""A model's parameter counts, from its config built on the meta device: real numels, no memory, no weights.

    shape = count_shape(config)   # 72B: 71.46e9 parameters (the reward head replaces the 1.2e9 lm_head)

The counts the plan needs are the whole model's, one decoder layer's (the largest; FSDP gathers layer by layer)
and the rest (embeddings, final norm, reward head: the root group FSDP keeps gathered through a step), and for
adapters (`trainer.memory.lora`) every nn.Linear of the decoder by name and shape, and the reward head's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cheems.errors import ConfigError


@dataclass(frozen=True)
class Linear:
    name: str  # qualified in the sequence-classification model: "model.layers.0.self_attn.q_proj"
    layer: int  # the decoder layer holding it
    in_features: int
    out_features: int
    bias: bool


@dataclass(frozen=True)
class ModelShape:
    parameters: int  # every parameter element of the sequence-classification model
    tensors: int  # parameter tensors (AdamW keeps one `step` scalar each)
    layer_parameters: int  # the largest decoder layer's elements
    root_parameters: int  # outside the decoder layers: embeddings, final norm, reward head
    layers: int
    hidden_size: int
    intermediate_size: int
    kv_size: int  # key/value width: num_key_value_heads x head_dim
    linears: tuple[Linear, ...] = ()  # every nn.Linear inside the decoder layers (the head is not one of them)
    head_parameters: int = 0  # the reward head's elements (`score`: hidden_size x 1)
    head_tensors: int = 0


def count_shape(config: Any, trust_remote_code: bool = False) -> ModelShape:
    """Build `config`'s AutoModelForSequenceClassification (num_labels=1) on the meta device and count it."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from cheems.model import quiet_transformers

    quiet_transformers()
    config.num_labels = 1
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config, trust_remote_code=trust_remote_code)
    params = list(model.parameters())
    layers = getattr(model.base_model, "layers", None)
    if layers is None or len(layers) == 0:
        raise ConfigError(f"{type(model).__name__}: no decoder layers (base_model.layers) to plan with")
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    total = sum(p.numel() for p in params)
    head = model.get_submodule(_head_name(model))
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return ModelShape(
        parameters=total,
        tensors=len(params),
        layer_parameters=max(per_layer),
        root_parameters=total - sum(per_layer),
        layers=len(layers),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        kv_size=getattr(config, "num_key_value_heads", heads) * head_dim,
        linears=_linears(model, layers),
        head_parameters=sum(p.numel() for p in head.parameters()),
        head_tensors=len(list(head.parameters())),
    )


def _linears(model: Any, layers: Any) -> tuple[Linear, ...]:
    import torch

    names = {id(module): name for name, module in model.named_modules()}
    return tuple(
        Linear(names[id(module)], i, module.in_features, module.out_features, module.bias is not None)
        for i, layer in enumerate(layers)
        for module in layer.modules()
        if isinstance(module, torch.nn.Linear)
    )


def _head_name(model: Any) -> str:
    """The reward head: the module transformers' sequence-classification models name `score` (or `classifier`)."""
    for name in ("score", "classifier"):
        if hasattr(model, name):
            return name
    raise ConfigError(f"{type(model).__name__}: no reward head (score) to plan with")
