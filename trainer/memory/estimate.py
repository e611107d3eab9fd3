"""Each GPU's memory for one training step: pure arithmetic over a `ModelShape` and a `PlanSetup`.

Assumptions (bytes per parameter element N, world size W; `trainer.train` keeps fp32 master weights):
- parameters 4, gradients 4, AdamW 8 (exp_avg + exp_avg_sq in fp32) + a 4-byte `step` per parameter tensor.
  FSDP (fsdp and W > 1) shards all three over the whole world (N/W each); DDP replicates them and adds its
  gradient buckets (another 4N); cpu_offload keeps FSDP's shards in host memory (0 on the GPU).
- FSDP2 with a bf16 MixedPrecisionPolicy gathers bf16 copies: the root group (embeddings, final norm, head),
  held from forward through backward, plus two decoder layers (the current one and the one prefetched); in
  backward one group's unsharded gradient in bf16 and its fp32 copy for the reduce-scatter (the larger of a
  layer and the root). Without bf16 the gathered copies are fp32 and gradients reduce in fp32.
- One process or DDP under bf16 autocast: autocast caches a bf16 copy of every weight for the forward (2N).
- Activations per token of one decoder layer (Qwen2/Llama shape: hidden h, MLP i, key/value width kv), as the
  tensors autograd saves, measured on CPU with saved-tensor hooks (tests/trainer/memory):
  r x (8h + 2kv) + m x 4i bytes, r the hidden states' width and m the matmul outputs'; fp32: r = m = 4;
  bf16 weights (FSDP): r = m = 2, plus 4h for the RMSNorms' fp32 copy; fp32 weights under autocast: r = 4, m = 2.
  Without checkpointing every layer keeps that; with it each layer keeps its input (r x h) and one layer at a
  time is recomputed in full. Outside the layers: final norm and the gradients flowing back, 4 x r x h, the
  token ids (8) and a dense T x T mask of one byte (packed rows; padded rows need less). Attention is a
  memory-efficient kernel (SDPA/FlexAttention: no T x T scores kept).
- Tokens per forward T: micro_batch_size x max_length, or max_tokens when set.
- Adapters (`lora_rank` > 0; counts and NF4 bytes in `trainer.memory.lora`): the frozen base in bf16 (fp32
  without bf16), sharded over the world under FSDP, whole otherwise, or for QLoRA its decoder linears in NF4
  (4.127 bits an element) and the rest bf16; the trainable adapters and the head's copy in fp32 with gradients
  and AdamW as above (DDP buckets them too); under FSDP the adapters are gathered with their layer, and only
  trainable gradients are reduced; one process or DDP under autocast caches bf16 copies of the trainable weights
  only; QLoRA dequantises one linear at a time to bf16. Activations are the bf16 formula (the base is bf16)
  with what the adapters add and a frozen base drops (`lora.adapter_activation_bytes`).
- A fixed 1 GiB for the CUDA context and kernels' workspaces, 1 GiB more for NCCL when W > 1, and a 10 %
  fragmentation margin over everything the caching allocator holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainer.memory import lora
from trainer.memory.count import ModelShape

GIB = 1024**3
CUDA_CONTEXT = 1 * GIB
NCCL_BUFFERS = 1 * GIB
FRAGMENTATION = 0.10


@dataclass(frozen=True)
class PlanSetup:
    world_size: int  # processes in the job, one per GPU (nnodes x nproc)
    fsdp: bool  # shard over the world (when world_size > 1); else DDP replicas
    bf16: bool  # bf16 compute: FSDP's bf16 parameters, or autocast over fp32 weights
    checkpointing: bool  # activation (gradient) checkpointing per decoder layer
    cpu_offload: bool  # FSDP's sharded states in host memory
    tokens: int  # tokens per forward per process
    budget: int | None = None  # bytes a GPU has; None: unknown
    row: int = 0  # tokens a row of the forward holds at most (max_length); 0: all of `tokens`
    lora_rank: int = 0  # adapters of this rank over a frozen base; 0 = full fine-tuning
    lora_targets: tuple[str, ...] = ()  # module names (empty: every linear of the decoder)
    lora_dropout: bool = False  # dropout before the adapters (it keeps a mask and the dropped input)
    load_in_4bit: bool = False  # QLoRA: the frozen base's decoder linears in NF4 (one process or DDP, no FSDP)

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.tokens < 1:
            raise ValueError(f"world_size and tokens must be >= 1, got {self.world_size} and {self.tokens}")

    @property
    def adapters(self) -> str:
        """ "" for full fine-tuning, else "LoRA" or "QLoRA"."""
        return ("QLoRA" if self.load_in_4bit else "LoRA") if self.lora_rank else ""

    @property
    def mode(self) -> str:
        if self.world_size == 1:
            return "one process"
        return "FSDP" if self.fsdp else "DDP"

    def but(self, **changes: object) -> PlanSetup:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row:
    name: str
    bytes: int
    note: str


@dataclass(frozen=True)
class MemoryPlan:
    shape: ModelShape
    setup: PlanSetup
    rows: list[Row]

    @property
    def total(self) -> int:
        return sum(r.bytes for r in self.rows)

    @property
    def fits(self) -> bool | None:
        return None if self.setup.budget is None else self.total <= self.setup.budget

    def row(self, name: str) -> int:
        return next(r.bytes for r in self.rows if r.name == name)


def estimate(shape: ModelShape, setup: PlanSetup) -> MemoryPlan:
    """Each GPU's rows: states, gathered copies, activations, overhead and the fragmentation margin."""
    if setup.lora_rank:
        return _finish(shape, setup, _adapter_rows(shape, setup))
    n, fsdp = shape.parameters, setup.mode == "FSDP"
    share = -(-n // setup.world_size) if fsdp else n
    where = "host (cpu_offload)" if fsdp and setup.cpu_offload else f"1/{setup.world_size}" if fsdp else "whole"
    on_gpu = 0 if fsdp and setup.cpu_offload else 1
    buckets = 4 * n if setup.mode == "DDP" else 0
    rows = [
        Row("parameters", on_gpu * 4 * share, f"fp32 master weights, {where}"),
        Row("gradients", on_gpu * 4 * share + buckets, f"fp32, {where}" + (" + DDP buckets" if buckets else "")),
        Row("optimizer", on_gpu * (8 * share + 4 * shape.tensors), f"AdamW exp_avg + exp_avg_sq fp32, {where}"),
        *_working_copies(shape, setup),
        Row("activations", activation_bytes(shape, setup), _activation_note(setup)),
    ]
    return _finish(shape, setup, rows)


def _finish(shape: ModelShape, setup: PlanSetup, rows: list[Row]) -> MemoryPlan:
    fixed = CUDA_CONTEXT + (NCCL_BUFFERS if setup.world_size > 1 else 0)
    margin = int(FRAGMENTATION * sum(r.bytes for r in rows))
    rows.append(Row("overhead", fixed, "CUDA context" + (" + NCCL" if setup.world_size > 1 else "")))
    rows.append(Row("fragmentation", margin, f"{FRAGMENTATION:.0%} of the allocator's share"))
    return MemoryPlan(shape, setup, rows)


def _adapter_rows(shape: ModelShape, setup: PlanSetup) -> list[Row]:
    """LoRA and QLoRA: the frozen base, the trainable adapters + head with their AdamW state, working copies."""
    adapters = lora.lora_counts(shape, setup.lora_rank, setup.lora_targets)
    fsdp, width = setup.mode == "FSDP", 2 if setup.bf16 else 4
    kind = "bf16" if setup.bf16 else "fp32"
    where = "host (cpu_offload)" if fsdp and setup.cpu_offload else f"1/{setup.world_size}" if fsdp else "whole"
    on_gpu = 0 if fsdp and setup.cpu_offload else 1
    n, t = shape.parameters, adapters.trainable
    share = -(-t // setup.world_size) if fsdp else t
    if setup.load_in_4bit:
        base = Row("frozen base", lora.qlora_base_bytes(shape), "decoder linears NF4 (4.127 bits), the rest bf16")
    else:
        base = Row("frozen base", on_gpu * width * (-(-n // setup.world_size) if fsdp else n), f"{kind}, {where}")
    buckets = 4 * t if setup.mode == "DDP" else 0
    rows = [
        base,
        Row("parameters", on_gpu * 4 * share, f"fp32 adapters + head ({t / 1e6:,.1f}M trainable), {where}"),
        Row("gradients", on_gpu * 4 * share + buckets, f"fp32, {where}" + (" + DDP buckets" if buckets else "")),
        Row("optimizer", on_gpu * (8 * share + 4 * adapters.tensors), f"AdamW exp_avg + exp_avg_sq fp32, {where}"),
    ]
    if fsdp:
        layer = shape.layer_parameters + adapters.layer_trainable
        gathered = width * (shape.root_parameters + shape.head_parameters + 2 * layer)
        group = max(adapters.layer_trainable, shape.head_parameters)
        rows.append(Row("gathered weights", gathered, f"unsharded {kind}: root group + 2 layers with adapters"))
        rows.append(Row("gathered gradients", (width + 4 if setup.bf16 else 4) * group, "one adapter group's"))
    elif setup.bf16:
        rows.append(Row("autocast copies", 2 * t, "bf16 copy of every trainable weight during forward"))
    if setup.load_in_4bit:
        rows.append(Row("dequantised weight", 2 * lora.largest_linear(shape), "bf16, one NF4 linear at a time"))
    rows.append(Row("activations", activation_bytes(shape, setup), _activation_note(setup)))
    return rows


def _working_copies(shape: ModelShape, setup: PlanSetup) -> list[Row]:
    width = 2 if setup.bf16 else 4
    if setup.mode == "FSDP":
        gathered = width * (shape.root_parameters + 2 * shape.layer_parameters)
        group = max(shape.layer_parameters, shape.root_parameters)
        reduce = (width + 4 if setup.bf16 else 4) * group
        kind = "bf16" if setup.bf16 else "fp32"
        return [
            Row("gathered weights", gathered, f"unsharded {kind}: root group + 2 layers"),
            Row("gathered gradients", reduce, f"one group's unsharded {kind} gradient" + (" + fp32" * setup.bf16)),
        ]
    if setup.bf16:
        return [Row("autocast copies", 2 * shape.parameters, "bf16 copy of every weight during forward")]
    return []


def layer_activation_bytes(shape: ModelShape, bf16: bool, fsdp: bool) -> int:
    """Bytes one decoder layer saves for backward, per token."""
    r, m = _widths(bf16, fsdp)
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.kv_size
    norms = 4 * h if r < 4 else 0
    return r * (8 * h + 2 * kv) + m * 4 * i + norms


def activation_bytes(shape: ModelShape, setup: PlanSetup) -> int:
    """One forward's saved activations at `setup.tokens` tokens, per process."""
    bf16_weights = setup.mode == "FSDP" or bool(setup.lora_rank)  # adapters: the frozen base is bf16 everywhere
    r, _ = _widths(setup.bf16, bf16_weights)
    layer = layer_activation_bytes(shape, setup.bf16, bf16_weights)
    if setup.lora_rank and setup.bf16:
        adapters = lora.lora_counts(shape, setup.lora_rank, setup.lora_targets)
        autocast = setup.mode != "FSDP"  # fp32 adapters under autocast; FSDP gathers them in bf16
        layer += lora.adapter_activation_bytes(shape, adapters, autocast, setup.lora_dropout)
    per_layer = r * shape.hidden_size if setup.checkpointing else layer
    recomputed = layer if setup.checkpointing else 0
    outside = 4 * r * shape.hidden_size + 8
    t = setup.tokens
    mask = t * min(t, setup.row or t)  # one byte per pair of tokens within a row
    return t * (shape.layers * per_layer + recomputed + outside) + mask


def _widths(bf16: bool, fsdp: bool) -> tuple[int, int]:
    """(hidden states' bytes, matmul outputs' bytes) per element."""
    if not bf16:
        return 4, 4
    return (2, 2) if fsdp else (4, 2)


def _activation_note(setup: PlanSetup) -> str:
    how = "checkpointed: each layer's input + one layer" if setup.checkpointing else "every layer kept"
    return f"{setup.tokens:,} tokens, {how}"
