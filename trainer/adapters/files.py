"""The trained adapter as peft writes it, beside the merged model: OUT/adapter.

    export_adapter(base, OUT / "adapter", world, base_model=config.model)

    # whoever wants the adapter rather than the merged model:
    model = PeftModel.from_pretrained(AutoModelForSequenceClassification.from_pretrained(BASE, num_labels=1),
                                      "OUT/adapter")

The folder holds `adapter_config.json` (the run's LoraConfig, `inference_mode` on, `base_model_name_or_path` the
checkpoint training started from) and `adapter_model.safetensors`: LoRA's A and B of every layer and the head's
trained copy, under the names `PeftModel.save_pretrained` gives them (peft's `get_peft_model_state_dict` names
them). peft's own `save_pretrained` reads the tensors where they lie, which under FSDP2 are each rank's shards:
here every rank gathers each adapter tensor whole (`full_tensor`, in state-dict order) and rank 0 writes them.
The folder is replaced whole, as the model's is (`trainer.weights.export`'s `begin` / `publish`): written
aside, synced, swapped in.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from trainer.distributed import World, barrier
from trainer.weights.export import begin, full_tensor, publish

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"  # peft's file names


def export_adapter(base: Any, directory: Path, world: World, base_model: str | None = None) -> Path | None:
    """Every rank calls it (each takes part in the gathers); rank 0 writes the folder aside and swaps it into
    `directory`, and returns it; the others return None once it is in place."""
    name, config = active_config(base)
    gathered = adapter_tensors(base, name)
    target = directory.resolve()
    if world.is_main:
        staging = begin(target)
        try:
            write_adapter(base, name, config, gathered, staging, base_model)
            publish(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    barrier(world)
    return directory if world.is_main else None


def active_config(base: Any) -> tuple[str, Any]:
    """(the active adapter's name, its LoraConfig): peft keeps its configs on the model it injected layers into."""
    configs = getattr(base, "peft_config", None)
    if not configs:
        raise ValueError(f"{type(base).__name__} carries no peft adapter (peft_config): nothing to export")
    from peft.tuners.tuners_utils import BaseTunerLayer

    active = {a for m in base.modules() if isinstance(m, BaseTunerLayer) for a in m.active_adapters}
    if len(active) != 1 or next(iter(active)) not in configs:
        raise ValueError(f"active adapters {sorted(active)} of {sorted(configs)}: exactly one can be exported")
    name = next(iter(active))
    return name, configs[name]


def adapter_tensors(base: Any, name: str) -> dict[str, Any]:
    """The adapter's entries of the state dict (LoRA's and the saved modules' copies), each gathered whole on
    every rank, on the CPU; the frozen base is neither gathered nor kept."""
    wanted = (f".lora_A.{name}.", f".lora_B.{name}.", f".modules_to_save.{name}.")
    return {k: full_tensor(t).detach().cpu() for k, t in base.state_dict().items() if any(w in k for w in wanted)}


def write_adapter(
    base: Any, name: str, config: Any, gathered: dict[str, Any], directory: Path, base_model: str | None
) -> None:
    """adapter_model.safetensors and adapter_config.json into `directory`, as `PeftModel.save_pretrained`."""
    from peft import get_peft_model_state_dict

    own = get_peft_model_state_dict(base, state_dict=gathered, adapter_name=name, save_embedding_layers=False)
    # the names PeftModel.state_dict() has: the tuner (`base_model`) around the transformers model (`model`)
    tensors = {f"base_model.model.{k}": v.contiguous() for k, v in own.items()}
    save_file(tensors, directory / WEIGHTS, metadata={"format": "pt"})
    saved = copy.deepcopy(config)
    saved.inference_mode = True  # as peft saves it: loaded for inference unless is_trainable
    if isinstance(saved.target_modules, set):  # written in a fixed order: each process orders a set its own way
        saved.target_modules = sorted(saved.target_modules)
    if base_model is not None:
        saved.base_model_name_or_path = base_model
    saved.save_pretrained(str(directory))
