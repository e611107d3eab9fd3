"""A LoRA-trained reward model merged into the plain checkpoint's tensors, one tensor at a time.

    export_model(base, tokenizer, OUT / "model", metadata, world, tensors=merged_tensors(base))

`base` is the transformers model peft injected its layers into (`PeftModel.base_model.model`, trained in place).
Its state dict is walked in order and each entry becomes what a plain `AutoModelForSequenceClassification` holds
under the plain name:

- a LoRA-wrapped linear's `...q_proj.base_layer.weight` becomes `...q_proj.weight` = W + scaling * B @ A (the
  layer's own scaling, alpha / r or rsLoRA's; computed in float32 and cast back to W's dtype; a 4-bit QLoRA
  weight is dequantized first, to its compute dtype); its other base tensors (the bias) lose `base_layer`; the
  `lora_A` / `lora_B` tensors themselves are not written;
- the head (`modules_to_save`) is written from its trained copy as `score.weight`; the frozen original
  (`original_module`) is dropped;
- every other tensor as it is.

Under FSDP2 every tensor is a DTensor: W, A and B are each gathered whole (`full_tensor`, a collective every rank
takes part in, in the same order) before they are combined, so this works where peft's own `merge_and_unload`
(which adds into the sharded weight in place) does not. The model is left untouched: nothing is merged into it,
and training or evaluating it afterwards sees the adapters as before. Host memory holds the tensors of one layer
at a time (the caller's `ShardWriter` adds one shard).

Refused in one line: DoRA, LoRA biases, adapters on embeddings or convolutions, several active adapters, a layer
already merged (its W holds the delta once already).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from trainer.adapters.lora import BASE, SAVED  # where peft puts the base linear, the head's trained copy
from trainer.weights.export import full_tensor


@dataclass(frozen=True)
class Adapter:
    """One LoRA-wrapped linear: where its state-dict entries lie and how its delta is formed."""

    prefix: str  # the module's name, `model.layers.0.self_attn.q_proj`
    name: str  # the active adapter, `default`
    scaling: float  # alpha / r (or alpha / sqrt(r) with rsLoRA)
    fan_in_fan_out: bool  # the base stores its weight transposed (GPT-2's Conv1D)

    @property
    def a(self) -> str:
        return f"{self.prefix}.lora_A.{self.name}.weight"

    @property
    def b(self) -> str:
        return f"{self.prefix}.lora_B.{self.name}.weight"


@dataclass(frozen=True)
class Layout:
    """The model's peft layers by module name: LoRA linears, heads trained whole (`modules_to_save`), and
    linears whose weight is stored in 4 bits (QLoRA's frozen base)."""

    adapters: dict[str, Adapter]
    saved: dict[str, str]  # a wrapped module's name -> its active adapter's name
    quantized: dict[str, Any]  # a module's name -> the module, its weight a bitsandbytes Params4bit

    def plain_name(self, name: str) -> str | None:
        """The name `name` has in the plain model, or None for an entry the plain model does not hold (LoRA's
        A and B, a head's frozen original, another adapter's copy, a 4-bit weight's quantization state)."""
        prefix, rest = _owner(name, self.quantized)
        if prefix is not None and rest.startswith("weight."):
            return None  # weight.absmax, weight.quant_map...: what dequantizes it, not a tensor of the model
        prefix, rest = _owner(name, self.adapters)
        if prefix is not None:
            return f"{prefix}.{rest.removeprefix(f'{BASE}.')}" if rest.startswith(f"{BASE}.") else None
        prefix, rest = _owner(name, self.saved)
        if prefix is not None:
            keep = f"{SAVED}.{self.saved[prefix]}."
            return f"{prefix}.{rest.removeprefix(keep)}" if rest.startswith(keep) else None
        return name

    def whole(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Entry `name` whole: gathered from every rank, or a 4-bit weight dequantized to its compute dtype."""
        module = self.quantized.get(name.removesuffix(".weight")) if name.endswith(".weight") else None
        if module is None:
            return full_tensor(tensor)
        from peft.utils.integrations import dequantize_module_weight

        return dequantize_module_weight(module).detach()


def layout_of(base: Any) -> Layout:
    """Every LoRA layer, saved module and 4-bit linear of `base`; refuses (ValueError, one line) what this merge
    cannot do."""
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import ModulesToSaveWrapper

    adapters, saved, quantized = {}, {}, {}
    for prefix, module in base.named_modules():
        if isinstance(module, LoraLayer):
            adapters[prefix] = _adapter(prefix, module)
        elif isinstance(module, ModulesToSaveWrapper):
            saved[prefix] = _one_active(prefix, module.active_adapters)
        elif type(getattr(module, "weight", None)).__name__ == "Params4bit":
            quantized[prefix] = module
    return Layout(adapters, saved, quantized)


def merged_tensors(base: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(plain name, whole tensor) for every tensor of the merged model, in state-dict order. Every rank iterates
    it to the end (the gathers are collectives); each gets the whole tensors."""
    layout = layout_of(base)
    state = base.state_dict()
    for name, tensor in state.items():
        plain = layout.plain_name(name)
        if plain is None:
            continue
        whole = layout.whole(name, tensor)
        owner = layout.adapters.get(name.removesuffix(f".{BASE}.weight"))
        if owner is not None and name == f"{owner.prefix}.{BASE}.weight":
            whole = merged_weight(owner, whole, state)
        yield plain, whole


def merged_weight(adapter: Adapter, whole: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """W + scaling * B @ A for the whole W: A and B each gathered whole, summed in float32, cast back to W's
    dtype."""
    a, b = full_tensor(state[adapter.a]), full_tensor(state[adapter.b])
    delta = (b.to(torch.float32) @ a.to(device=b.device, dtype=torch.float32)) * adapter.scaling
    if adapter.fan_in_fan_out:
        delta = delta.T
    return (whole.to(torch.float32) + delta.to(whole.device)).to(whole.dtype)


def _adapter(prefix: str, layer: Any) -> Adapter:
    name = _one_active(prefix, layer.active_adapters)
    where = f"{prefix} ({type(layer).__name__})"
    if getattr(layer, "merged", False):
        raise ValueError(f"{where}: its adapter is merged into the weight already; unmerge it before exporting")
    if name not in layer.lora_A or not isinstance(layer.lora_A[name], torch.nn.Linear):
        raise ValueError(f"{where}: only LoRA on linear layers can be merged (lora_targets names linears)")
    if layer.use_dora.get(name) or layer.lora_bias.get(name):
        raise ValueError(f"{where}: DoRA and LoRA biases cannot be merged by this export (use_dora, lora_bias)")
    return Adapter(prefix, name, float(layer.scaling[name]), bool(layer.fan_in_fan_out))


def _one_active(prefix: str, active: list[str]) -> str:
    if len(active) != 1:
        raise ValueError(f"{prefix}: {len(active)} active adapters {active}; exactly one can be exported")
    return active[0]


def _owner(name: str, modules: dict[str, Any]) -> tuple[str | None, str]:
    """(the module of `modules` holding state-dict entry `name`, the rest of the name), or (None, name)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in modules:
            return prefix, ".".join(parts[cut:])
    return None, name
