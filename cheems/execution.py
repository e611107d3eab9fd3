"""How a reward model runs: the device, the dtype, prefix sharing, and how much one forward holds.

    execution = Execution(device="cuda", dtype=torch.bfloat16, share=True, max_sequences=64, max_tokens=32768)
    model = execution.load("out/train-tiny/model")        # on the device, in the dtype, in eval mode
    rewards = execution.score(model, sequences)           # float32 rewards, forwards within the limits

One object for every place that runs a model to score (the scorer's torch backend, the infer function of the
Triton it starts, the Python-backend model `cheems export-triton` writes), so a dtype or a limit means the same
wherever the model runs. `cheems.precision.resolve_dtype` turns a command line's dtype name into `dtype`, and
`cheems.attention.resolve_attention` its attention name into `attention`, and `resolve_device` its device name
(`auto`: the GPU when there is one) into `device`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cheems.errors import ConfigError
from cheems.forward import MAX_BATCH_TOKENS, score_in_groups
from cheems.precision import dtype_name


def resolve_device(name: str) -> str:
    """The torch device `name` means here: `auto` is "cuda" when torch has CUDA here, else "cpu"; any other name
    is checked (ConfigError naming it: one torch does not know, a CUDA device this machine does not have)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device {name!r} is not a torch device: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name}: CUDA is not available here (torch {torch.__version__})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return name


@dataclass(frozen=True)
class Execution:
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    share: bool = False  # pack sequences with a common prefix (where the model's attention takes the mask)
    max_sequences: int = 64  # rows of one forward
    max_tokens: int = MAX_BATCH_TOKENS  # padded tokens of one forward
    attention: str = "sdpa"  # transformers' attn_implementation, resolved (`cheems.attention.resolve_attention`)

    def __post_init__(self) -> None:
        for name in ("max_sequences", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    def load(self, path: str | Path, tokenizer: Any = None) -> Any:
        """The checkpoint's model on the device, in the dtype, in eval mode (`tokenizer`: see `load_model`)."""
        from cheems.model import load_model

        model, _ = load_model(
            path, dtype=self.dtype, tokenizer=tokenizer, attn_implementation=self.attention, device=self.device
        )
        return model.to(self.device).eval()

    def score(self, model: Any, sequences: Sequence[Sequence[int]]) -> list[float]:
        """Float32 rewards of `sequences`, in length-grouped forwards within the limits (shared where set)."""
        return score_in_groups(model, sequences, self.max_sequences, self.device, self.share, self.max_tokens)
