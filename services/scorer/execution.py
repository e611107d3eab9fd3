"""How the scorer runs a model: the device, the dtype, prefix sharing and what one forward may hold.

    execution = execution_of(config)        # the dtype resolved for the device; ConfigError if it cannot run
    TorchBackend(path, execution)           # in process, calls batched by `batcher.Batcher`
    TritonHost(path, name, execution)       # in the Triton this process starts (its dynamic batcher)

One object for both backends, so `--dtype`, `--max-batch-size`, `--max-batch-tokens` and `--queue-delay-us`
mean the same on either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cheems.precision import dtype_name, resolve_dtype
from services.scorer.batcher import BatchLimits
from services.scorer.config import ScorerConfig


@dataclass(frozen=True)
class Execution:
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    share: bool = False  # pack sequences with a common prefix (where the model's attention takes the mask)
    limits: BatchLimits = field(default_factory=BatchLimits)

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)


def execution_of(config: ScorerConfig) -> Execution:
    """The scorer's settings for its models; the dtype is resolved (and refused) here, before anything loads."""
    limits = BatchLimits(config.max_batch_size, config.max_batch_tokens, config.queue_delay_us / 1e6)
    return Execution(config.device, resolve_dtype(config.dtype, config.device), config.prefix_sharing, limits)
