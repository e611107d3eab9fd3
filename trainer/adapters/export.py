"""A LoRA run's export: the merged reward model in OUT/model, the adapter in OUT/adapter.

    export_lora(base, tokenizer, OUT, metadata, world, max_shard_bytes, base_model=config.model)

OUT/model is the checkpoint a full fine-tuning run exports (`trainer.weights.export`: sharded safetensors, the
plain sequence-classification class in config.json, no peft names), its tensors the adapters merged in
(`trainer.adapters.merge`): every backend, `cheems rewards`, the lifecycle and the evaluator take it as they take
any other. OUT/adapter holds the adapter as peft writes it (`trainer.adapters.files`), for whoever wants to load it
over the base checkpoint. Each folder is replaced whole; the model is written first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.adapters.files import export_adapter
from trainer.adapters.merge import merged_tensors
from trainer.distributed import World
from trainer.weights.export import DEFAULT_MAX_SHARD_BYTES, export_model

MODEL, ADAPTER = "model", "adapter"  # the folders under OUT


def export_lora(
    base: Any,
    tokenizer: Any,
    out: Path,
    metadata: dict[str, Any] | None,
    world: World,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    base_model: str | None = None,
) -> Path | None:
    """Every rank calls it (the gathers are collectives); rank 0 returns OUT/model, the others None."""
    unquantized(base.config)
    model = export_model(base, tokenizer, out / MODEL, metadata, world, max_shard_bytes, merged_tensors(base))
    export_adapter(base, out / ADAPTER, world, base_model)
    return model


def unquantized(config: Any) -> None:
    """The merged model is stored dequantized: its config loses what says its base was loaded in 4 bits (QLoRA),
    or transformers would load the export as a quantized checkpoint."""
    for key in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, key):
            delattr(config, key)
