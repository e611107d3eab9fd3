"""A model's parameter counts, from its config built on the meta device: real numels, no memory, no weights.

    shape = count_shape(config)   # 72B: 71.46e9 parameters (the reward head replaces the 1.2e9 lm_head)

The counts the plan needs are the whole model's, one decoder layer's (the largest; FSDP gathers layer by layer)
and the rest (embeddings, final norm, reward head: the root group FSDP keeps gathered through a step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cheems.errors import ConfigError


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
    )
