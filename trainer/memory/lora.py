"""What adapters change in the plan: the trainable LoRA count, the NF4 base's bytes, the adapters' activations.

    adapters = lora_counts(shape, rank=16, targets=())   # every linear of the decoder: r x (in + out) each
    nf4_bytes(8192 * 8192)                               # one QLoRA weight: 4.127 bits an element

Pure arithmetic over a `ModelShape`; the rows themselves are built in `trainer.memory.estimate`.

The target rule is the adapters' (`TrainConfig.lora_targets`): empty = every nn.Linear of the decoder layers, never
the reward head; otherwise a linear is targeted when its name is a target or ends with "." + a target (peft's
rule for a list of module names). Each targeted (out, in) linear gets A (r x in) and B (out x r), no bias; the
head is trained whole (peft's `modules_to_save`: a trainable copy beside the frozen original).

QLoRA (bitsandbytes NF4, blocksize 64, double quantisation): the packed weight is half a byte an element; each
block of 64 has an absmax constant, itself quantised to one byte, with one fp32 absmax for every 256 of those
(second level): 0.5 + 1/64 + 4/(64 x 256) bytes = 4.127 bits an element. Per weight also its 16-entry NF4 code
and the absmax offset in fp32 (68 bytes). transformers' bnb integration replaces every nn.Linear but the
modules `get_keys_to_not_convert` returns (tied weights, the output embeddings and the model's last module: for
a sequence-classification model, the `score` head), so the decoder's linears are NF4 while the embeddings (an
nn.Embedding), the norms, the linears' biases and the head stay in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

from cheems.errors import ConfigError
from trainer.memory.count import Linear, ModelShape

NF4_BLOCK = 64  # elements sharing one absmax (bitsandbytes' default blocksize for 4-bit)
NESTED_BLOCK = 256  # absmax constants sharing one fp32 absmax in double quantisation
NF4_CONSTANTS = 16 * 4 + 4  # per weight: the NF4 code (16 fp32) and the absmax offset (fp32)


@dataclass(frozen=True)
class Adapters:
    rank: int
    targets: tuple[Linear, ...]  # the targeted linears of the decoder
    adapter_parameters: int  # sum of r x (in + out) over the targets
    trainable: int  # adapters + the reward head's trainable copy
    tensors: int  # trainable tensors: A and B per target, the head's
    layer_trainable: int  # the largest decoder layer's adapter elements (an FSDP group of its own)

    @property
    def per_layer(self) -> int:
        """Targeted linears in the layer with the most (for the plan's note)."""
        layers = [t.layer for t in self.targets]
        return max(layers.count(i) for i in set(layers))


def targeted(shape: ModelShape, targets: tuple[str, ...] | list[str]) -> tuple[Linear, ...]:
    """The linears of the decoder the adapters go on; ConfigError naming lora_targets when none matches."""
    if not targets:
        return shape.linears
    found = tuple(lin for lin in shape.linears if any(lin.name == t or lin.name.endswith(f".{t}") for t in targets))
    if not found:
        raise ConfigError(f"lora_targets {list(targets)} match no linear of the decoder (e.g. q_proj, down_proj)")
    return found


def lora_counts(shape: ModelShape, rank: int, targets: tuple[str, ...] | list[str] = ()) -> Adapters:
    """The trainable parameters of LoRA at `rank` on `targets`, and the reward head trained whole."""
    chosen = targeted(shape, targets)
    adapters = sum(rank * (lin.in_features + lin.out_features) for lin in chosen)
    by_layer: dict[int, int] = {}
    for lin in chosen:
        by_layer[lin.layer] = by_layer.get(lin.layer, 0) + rank * (lin.in_features + lin.out_features)
    return Adapters(
        rank=rank,
        targets=chosen,
        adapter_parameters=adapters,
        trainable=adapters + shape.head_parameters,
        tensors=2 * len(chosen) + shape.head_tensors,
        layer_trainable=max(by_layer.values()),
    )


def nf4_bytes(elements: int) -> int:
    """Bytes of one weight of `elements` in NF4 with double quantisation (bitsandbytes, blocksize 64)."""
    blocks = -(-elements // NF4_BLOCK)
    return -(-elements // 2) + blocks + 4 * -(-blocks // NESTED_BLOCK) + NF4_CONSTANTS


def qlora_base_bytes(shape: ModelShape) -> int:
    """The frozen QLoRA base: the decoder's linear weights in NF4, every other element (biases, embeddings,
    norms, the head and its trainable copy's frozen original) in bf16."""
    quantised = sum(lin.in_features * lin.out_features for lin in shape.linears)
    nf4 = sum(nf4_bytes(lin.in_features * lin.out_features) for lin in shape.linears)
    return nf4 + 2 * (shape.parameters - quantised)


def largest_linear(shape: ModelShape) -> int:
    return max(lin.in_features * lin.out_features for lin in shape.linears)


def adapter_activation_bytes(shape: ModelShape, adapters: Adapters, autocast: bool, dropout: bool) -> int:
    """Bytes a decoder layer's adapters add per token to `estimate.layer_activation_bytes` of a bf16 base, less
    what a frozen base no longer saves (measured with saved-tensor hooks, tests/trainer/memory/test_lora.py).

    A frozen base keeps no input of its linears or its RMSNorms' normalised states for weight gradients: minus
    2 x (3h + i) (the Qwen2/Llama layer's four distinct linear inputs) and 4h. Each target's A keeps its input:
    the same bf16 tensor the base read when the adapters are bf16 (FSDP gathers them so; counted once per target
    when not every linear is targeted, an overestimate), else, under autocast
    over fp32 adapters, a bf16 copy of its own (peft casts the input to the adapters' dtype, autocast back):
    2 x in each. Each target keeps its r-wide hidden state (2 bytes). Dropout keeps a mask and the dropped
    input: 3 bytes an input element on bf16 adapters, 4 under autocast."""
    h, i = shape.hidden_size, shape.intermediate_size
    layer = [t for t in adapters.targets if t.layer == adapters.targets[0].layer]
    inputs = sum(t.in_features for t in layer)
    frozen = -(2 * (3 * h + i) + 4 * h)
    every = len(layer) == sum(1 for lin in shape.linears if lin.layer == layer[0].layer)
    # bf16 adapters on every linear share the base's four inputs; on some, each target's counted (q, k, v share one)
    own_inputs = 2 * inputs if autocast or not every else 2 * (3 * h + i)
    hidden = 2 * adapters.rank * len(layer)
    dropped = (4 if autocast else 3) * inputs if dropout else 0
    return frozen + own_inputs + hidden + dropped
