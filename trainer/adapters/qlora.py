"""QLoRA: LoRA over a base loaded in 4-bit NF4 (double quantisation, bfloat16 compute) by bitsandbytes.

    check(config, world.device)          # first thing a run does: refused in one line where it cannot run
    base, tokenizer = load_quantized(config, world)

The 4-bit kernels are CUDA's: a run on another device is refused, as is one where bitsandbytes is not installed
(`pip install 'cheems[qlora]'`, which `make setup` leaves out), before any model loads. With fsdp it is refused
by the config (`TrainConfig`): FSDP2's fully_shard turns bitsandbytes' Params4bit into plain tensors
(bitsandbytes-foundation/bitsandbytes#1945, huggingface/accelerate#3983). The reward head stays unquantised: it is
trained whole.
"""

from __future__ import annotations

from typing import Any

import torch

from cheems.errors import ConfigError
from cheems.extras import missing
from cheems.model import load_model
from trainer.config import HEAD_NAMES, TrainConfig
from trainer.distributed import World

BITSANDBYTES = "bitsandbytes==0.50.2"  # pyproject's `qlora` extra
HEADS = list(HEAD_NAMES)  # never quantised: the head is trained whole


def check(config: TrainConfig, device: torch.device) -> None:
    """Refuse load_in_4bit where it cannot run: off CUDA, or without bitsandbytes (ConfigError, one line)."""
    if not config.load_in_4bit:
        return
    if device.type != "cuda":
        raise ConfigError(
            f"load_in_4bit (QLoRA) needs a CUDA GPU (bitsandbytes' 4-bit kernels); this run is on {device.type}: "
            "train LoRA over the full-precision base (load_in_4bit=false)"
        )
    if missing("qlora"):
        raise ConfigError(
            f"load_in_4bit (QLoRA) needs bitsandbytes, not installed here: pip install {BITSANDBYTES} "
            "(or pip install 'cheems[qlora]')"
        )


def quantization() -> Any:
    """transformers' BitsAndBytesConfig: NF4 with double quantisation, bfloat16 compute, the head unquantised."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
        llm_int8_skip_modules=HEADS,
    )


def load_quantized(config: TrainConfig, world: World) -> tuple[Any, Any]:
    """(the model with its base in 4-bit on this rank's GPU, ready for adapters; its tokenizer): quantised while
    it loads, then peft's preparation for k-bit training (norms and head in float32, inputs that carry gradients
    through a checkpointed frozen base)."""
    from peft import prepare_model_for_kbit_training

    check(config, world.device)
    base, tokenizer = load_model(
        config.model,
        dtype=torch.bfloat16,
        trust_remote_code=config.trust_remote_code,
        attn_implementation=config.attn_implementation,
        device=str(world.device),
        training=True,
        quantization=quantization(),
    )
    prepare_model_for_kbit_training(
        base,
        use_gradient_checkpointing=config.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    return base, tokenizer
