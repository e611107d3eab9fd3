"""What every part of the GPU report is told: the device, the model built for the run, its size, the folders.

The report builds one Qwen2-architecture RM over the real vocabulary with random weights (`build_checkpoint`):
on CUDA Qwen2.5-0.5B's shape, built in bfloat16 on the card and saved (about 1 GB), so that the H100's compute,
not start-up, is what the parts measure; on the CPU (`quick`) the tiny test shape, so that the whole report runs in
a minute or two and is tested. Each part reads the same `Setting`, written once as JSON for its process.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GPU_SHAPE = {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "intermediate": 4864}  # Qwen2.5-0.5B
CPU_SHAPE = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128}  # the tests' tiny RM


@dataclass(frozen=True)
class Setting:
    device: str  # "cuda" or "cpu"
    model: str  # the checkpoint directory every part loads
    folder: str  # where parts write their data, runs and figures
    shape: dict[str, int] = field(default_factory=lambda: dict(GPU_SHAPE))
    nproc: int = 1  # FSDP ranks: 2 when the host has two GPUs, else 1
    budget: float = 0.0  # seconds the part that reads it may take (0: the report has not given it one yet)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def dtype(self) -> str:
        """What "bf16" means where the part runs: bfloat16 on CUDA, float32 on the CPU (the trainer's rule)."""
        return "bfloat16" if self.cuda else "float32"

    def shape_argv(self) -> list[str]:
        """The shape as `bench/model_options.py`'s options."""
        names = {"hidden": "--hidden", "layers": "--layers", "heads": "--heads", "kv_heads": "--kv-heads"}
        argv = [x for key, option in names.items() for x in (option, str(self.shape[key]))]
        return [*argv, "--intermediate", str(self.shape["intermediate"])]

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> Setting:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return cls(**data)


def build_checkpoint(shape: dict[str, int], device: str, out: Path) -> tuple[Path, int]:
    """A random-weight RM of `shape` saved to `out` (bfloat16, built on the card, on CUDA; float32 on the CPU);
    (its directory, its parameters)."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    from cheems.model import init_head, save_model
    from trainer.tiny import build_tokenizer, tiny_config

    tokenizer = build_tokenizer()
    config = tiny_config(
        tokenizer,
        shape["hidden"],
        shape["layers"],
        heads=shape["heads"],
        kv_heads=shape["kv_heads"],
        intermediate=shape["intermediate"],
        num_labels=1,
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForSequenceClassification(config).to(dtype)
    init_head(model, 0)
    parameters = sum(p.numel() for p in model.parameters())
    save_model(model, tokenizer, out)
    return out, parameters
