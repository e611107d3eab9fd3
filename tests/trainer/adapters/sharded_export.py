"""Run by test_export under torchrun (2 processes, gloo): the LoRA tiny model sharded by FSDP2, each decoder layer
and then the root in a `fully_shard` group, so that every W, A, B and the head's copy is a DTensor; then exported.

    torchrun --nproc_per_node=2 -m tests.trainer.adapters.sharded_export CHECKPOINT OUT SEED MAX_SHARD_BYTES
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from tests.trainer.adapters.lora import lora_model
from trainer.adapters.export import export_lora
from trainer.distributed import setup, teardown


def main() -> None:
    checkpoint, out, seed, size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    world = setup()
    try:
        peft_model, tokenizer = lora_model(checkpoint, seed)
        base = peft_model.base_model.model
        for layer in base.model.layers:
            fully_shard(layer)
        fully_shard(base)
        assert all(isinstance(t, DTensor) for t in base.state_dict().values())
        export_lora(base, tokenizer, out, {"steps": 1}, world, size, str(checkpoint))
    finally:
        teardown()


if __name__ == "__main__":
    main()
