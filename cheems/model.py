"""Reward models as standard `AutoModelForSequenceClassification` (num_labels=1) checkpoints.

Any Hugging Face decoder with a scalar, bias-free head read at the last token: saved in
safetensors so vLLM, other servers and our scorer load it as they load Skywork-style RMs.
Official CheemsRM checkpoints (a causal LM plus a `v_head`) are converted by `convert_v_head`.
Shared by the trainer and the scorer; the forward pass is in `cheems.forward`.
Weights are only ever read from safetensors (no pickle), and remote code is off unless asked.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cheems.errors import ModelError

log = logging.getLogger(__name__)


def quiet_transformers() -> None:
    """Our own progress bar and logs report training; transformers' per-file bars are noise here."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def head_of(model: nn.Module) -> nn.Linear:
    """The scalar head (`score` in Llama/Qwen/Mistral-style classes)."""
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    if not isinstance(head, nn.Linear) or head.out_features != 1:
        raise ModelError(f"{type(model).__name__} has no scalar linear head (score/classifier with 1 output)")
    return head


def init_head(model: nn.Module, seed: int = 0) -> None:
    """Head weights ~ N(0, std = 1/(hidden+1)), as the official code initialises its v_head."""
    head = head_of(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = torch.randn(head.weight.shape, generator=generator) / (head.in_features + 1)
        head.weight.copy_(weight.to(head.weight.dtype))
        if head.bias is not None:
            head.bias.zero_()


def load_model(
    path: str | Path, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False
) -> tuple[Any, Any]:
    """(model, tokenizer) from a sequence-classification checkpoint directory, safetensors only."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    quiet_transformers()
    directory = Path(path)
    if not any(directory.glob("*.safetensors")):
        raise ModelError(f"{directory}: no *.safetensors weights (pickled .bin checkpoints are refused)")
    model = AutoModelForSequenceClassification.from_pretrained(
        directory, dtype=dtype, use_safetensors=True, trust_remote_code=trust_remote_code, num_labels=1
    )
    tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=trust_remote_code)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    head_of(model)
    return model, tokenizer


def save_model(
    model: Any,
    tokenizer: Any,
    out: str | Path,
    metadata: dict[str, Any] | None = None,
    state_dict: dict[str, Any] | None = None,
) -> Path:
    """Save weights (safetensors), config, tokenizer and chat template; `metadata` -> cheems_metadata.json.

    `state_dict` overrides the model's own (a full state dict gathered from DDP/FSDP ranks).
    """
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, state_dict=state_dict, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    if metadata is not None:
        text = json.dumps(metadata, ensure_ascii=False, indent=2, default=str)
        (directory / "cheems_metadata.json").write_text(text + "\n", encoding="utf-8")
    return directory


def convert_v_head(source: str | Path, out: str | Path) -> Path:
    """Convert an official CheemsRM-style checkpoint (causal LM + `v_head.weight`) to sequence classification."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    src = Path(source)
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{src}: no *.safetensors weights (pickled .bin checkpoints are refused)")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    v_head = state.pop("v_head.weight", None)
    if v_head is None:
        raise ModelError(f"{src}: no v_head.weight; not a CheemsRM-style checkpoint")
    config = AutoConfig.from_pretrained(src, num_labels=1)
    model = AutoModelForSequenceClassification.from_config(config)
    prefix = model.base_model_prefix
    backbone = {k.removeprefix(f"{prefix}."): v for k, v in state.items() if k.startswith(f"{prefix}.")}
    missing, unexpected = model.base_model.load_state_dict(backbone, strict=False)
    if missing or unexpected:
        raise ModelError(
            f"{src}: backbone weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    with torch.no_grad():
        head_of(model).weight.copy_(v_head.reshape(1, -1))
    tokenizer = AutoTokenizer.from_pretrained(src)
    model.config.pad_token_id = model.config.pad_token_id or tokenizer.pad_token_id
    return save_model(model, tokenizer, out, {"converted_from": str(src), "format": "cheemsrm-v_head"})
