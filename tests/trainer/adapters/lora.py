"""A LoRA-trained tiny reward model, as `trainer.adapters` trains it, for the export tests (and the torchrun
worker `sharded_export`): LoRA on every decoder linear, the head trained whole through `modules_to_save`, and
every B and the head's copy set to seeded random values, so an export that forgets one of them gives other
rewards (peft initialises B to zero and the copy to the original: a merge could ignore both and still pass)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from cheems.forward import forward_rewards
from cheems.model import load_model

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# token ids of ChatML-ish sequences, long enough for positions to matter
SEQUENCES = [
    [151644, 8948, 198, 2610, 525, 264, 10950, 17847] * 4,
    [108386, 3837, 104, 151645] * 3,
    [151644, 872, 198, *range(1000, 1030), 151645],
]


def lora_model(checkpoint: Path, seed: int = 0, tokenizer: Any = None, **changes: Any) -> tuple[Any, Any]:
    """(the PeftModel over `checkpoint`'s RM, its tokenizer); LoraConfig's r=4, lora_alpha=8 unless `changes`."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = load_model(checkpoint, tokenizer=tokenizer)
    settings: dict[str, Any] = {"r": 4, "lora_alpha": 8, "target_modules": TARGETS, "modules_to_save": ["score"]}
    torch.manual_seed(seed)  # LoRA's A are drawn from the global generator: the same model in every process
    peft_model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", **{**settings, **changes}))
    trained(peft_model.base_model.model, seed)
    return peft_model, tokenizer


def trained(base: Any, seed: int) -> None:
    """Every LoRA B and the head's trained copy drawn at random (seeded), as training would leave them."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in base.named_parameters():
            if ".lora_B." in name or ".modules_to_save." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)


def rewards(model: Any, sequences: list[list[int]] = SEQUENCES) -> list[float]:
    """Each sequence's reward through `model` (the adapter-wrapped transformers model or a plain one), float32."""
    with torch.no_grad():
        return [float(r) for r in forward_rewards(model.eval(), sequences).float()]
