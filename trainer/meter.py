"""What a training step costs the device: its peak memory beside the memory plan's, and model FLOP utilisation.

    meter = Meter.for_run(base_model, device, bf16=True, planned_bytes=plan.total)
    meter.stamp(record)      # at each step: memory_peak_bytes (a host-side counter: no device synchronisation)
    meter.finish(record)     # at each flush, once tokens_per_s is known: mfu (CUDA under bf16 only)

- `memory_peak_bytes`: on CUDA the caching allocator's peak reserved bytes (what the plan's rows and its
  fragmentation margin predict, without the CUDA context); on the CPU the process's peak resident set.
- `memory_planned_bytes`: the memory plan's total a GPU (`trainer.memory`), when one could be made.
- `mfu`: training FLOPs per token, times the step's tokens a second (each response's full length, as `tokens`: a
  prompt shared by prefix sharing counts once per response, as the model's work is counted), over the GPU's dense
  bf16 peak from `PEAK_BF16`; none on the CPU, under fp32, or on a GPU the table does not know. FLOPs per token:
  2 for the forward and 2 for the backward's input gradients per non-embedding weight, and 2 more for the weight
  gradient of each trained one: 6N for full fine-tuning, about 4N under LoRA, whose frozen base gets no weight
  gradients (counting 6N there would overstate its MFU by half).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from typing import Any

import torch

# dense bf16 tensor-core peaks (FLOP/s, without sparsity) from NVIDIA's data sheets; the first name found in the
# device's name wins, so the PCIe and NVL cards come before the SXM ones they share a name with
PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
)


def peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU named `device_name` (torch.cuda.get_device_name), None when not in the table."""
    return next((flops for name, flops in PEAK_BF16 if name in device_name), None)


def peak_memory(device: torch.device) -> int:
    """Peak bytes so far: the CUDA caching allocator's reserved peak, or the process's peak resident set."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_reserved(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # bytes on macOS, KiB on Linux


def non_embedding_parameters(model: Any, trained_only: bool = False) -> int:
    """Parameters a token's forward multiplies by: all but the input embedding table (a lookup); with
    `trained_only`, those of them that get gradients. A 4-bit weight (QLoRA) counts as the matrix it stands for."""
    embedding = {id(p) for p in model.get_input_embeddings().parameters()}
    return sum(
        _weights(p) for p in model.parameters() if id(p) not in embedding and (p.requires_grad or not trained_only)
    )


def _weights(parameter: torch.Tensor) -> int:
    state = getattr(parameter, "quant_state", None)  # bitsandbytes' Params4bit: two weights packed in a byte
    return int(torch.Size(state.shape).numel()) if state is not None else parameter.numel()


def training_flops_per_token(model: Any) -> float:
    """Forward 2N, input gradients 2N, weight gradients 2 x the trained N (module docstring)."""
    return 4.0 * non_embedding_parameters(model) + 2.0 * non_embedding_parameters(model, trained_only=True)


@dataclass(frozen=True)
class Meter:
    device: torch.device
    flops_per_token: float  # training FLOPs a token: `training_flops_per_token`
    peak_flops: float | None  # the device's dense peak at the precision trained in; None: no MFU
    planned_bytes: int | None = None  # the memory plan's total a GPU

    @classmethod
    def for_run(cls, model: Any, device: torch.device, bf16: bool, planned_bytes: int | None = None) -> Meter:
        peak = peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" and bf16 else None
        return cls(device, training_flops_per_token(model), peak, planned_bytes)

    def stamp(self, record: dict[str, Any]) -> None:
        record["memory_peak_bytes"] = peak_memory(self.device)
        if self.planned_bytes is not None:
            record["memory_planned_bytes"] = self.planned_bytes

    def finish(self, record: dict[str, Any]) -> None:
        if self.peak_flops:
            record["mfu"] = record["tokens_per_s"] * self.flops_per_token / self.peak_flops
