"""Models named by a Hugging Face Hub id, resolved to a directory in huggingface_hub's own cache.

    resolve_model("out/train/model")                   # a local checkpoint directory: returned as it is
    resolve_model("Qwen/Qwen2.5-72B-Instruct")         # downloaded once (safetensors, config, tokenizer,
    resolve_model("Qwen/Qwen2.5-72B-Instruct@a1b2c3")  # chat template), then found in the cache

`names` tells a path from an id (pure); `resolve` asks huggingface_hub and maps its failures onto the
project's error tree. The cache, offline mode and credentials are huggingface_hub's own settings:
HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE, HF_TOKEN, HF_ENDPOINT.
"""

from cheems.hub.names import HubModel, model_source
from cheems.hub.resolve import resolve_model, served_name

__all__ = ["HubModel", "model_source", "resolve_model", "served_name"]
