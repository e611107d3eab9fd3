"""The one configuration object of a training run. Recipes (`trainer.recipes`) return one.

`--set key=value` overrides a field from the command line; values are parsed by the field's type.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from cheems.attention import check_name
from cheems.formats.layouts import PARSERS
from trainer.data import LengthPolicy
from trainer.tracking.names import backends

MEMORY_CHECKS = ("refuse", "warn")
HEAD_NAMES = ("score", "classifier")  # sequence-classification heads (transformers' names)
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")
# The defaults `lr=0` resolves to. Full fine-tuning: the paper's 5e-6 (a 72B moved whole). Adapters learn a
# low-rank update from zero and a fresh head: TRL's, OpenRLHF's and PERL's LoRA reward models train at 1e-4 to 2e-4.
FULL_LR = 5e-6
LORA_LR = 1e-4


@dataclass
class TrainConfig:
    model: str = ""  # checkpoint directory (safetensors) or Hugging Face Hub id, org/name[@revision]
    train_files: list[str] = field(
        default_factory=list
    )  # preference or bench data, any layout cheems.formats.layouts reads
    train_format: str = ""  # force one layout for train_files (trl, alpaca, ...); empty: told by each record's fields
    eval_files: list[str] = field(default_factory=list)  # CheemsBench jsonl, evaluated periodically
    out_dir: str = "out/train"
    max_length: int = 2048
    length_policy: str = "drop"  # drop | left | right
    micro_batch_size: int = 2  # responses per forward per process (with max_tokens: at most this many)
    grad_accum_steps: int = 1
    global_batch_size: int = 0  # responses per optimizer step; 0 = micro x world x accum, else checked
    # tokens per forward per process, padding or packed length counted (trainer.microbatch); 0 = none. When set,
    # a step is global_batch_size responses (or micro x world x accum) split into as many forwards as fit
    max_tokens: int = 0
    epochs: float = 1.0
    # peak learning rate; 0 = the mode's default (`learning_rate`): FULL_LR for full fine-tuning, LORA_LR for adapters
    lr: float = 0.0
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    reg_coef: float = 0.1  # Gaussian prior on rewards (paper default)
    margin: float = 0.0
    seed: int = 0
    bf16: bool = True  # autocast on GPU; CPU always runs fp32
    gradient_checkpointing: bool = False
    fsdp: bool = False  # shard parameters (large models on GPUs; trainer.weights.sharding); DDP otherwise
    cpu_offload: bool = False  # with fsdp: parameters, gradients and optimizer state kept on the CPU
    # LoRA (trainer.adapters): adapters of this rank on `lora_targets`, the base frozen, the reward head trained whole
    # and the export merged into a plain checkpoint; 0 = full fine-tuning
    lora_rank: int = 0
    lora_alpha: float = 0.0  # the adapters' scale is lora_alpha / lora_rank; 0 = twice the rank
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=list)  # module names; empty = every linear of the decoder
    load_in_4bit: bool = False  # QLoRA: the frozen base in NF4 (double quantisation, bf16 compute); CUDA only
    # a run whose memory plan does not fit the GPU (trainer.memory.check): "refuse" it before loading, or "warn"
    # and go on (the plan's fixed costs are estimates: the run may then die of CUDA out-of-memory, even mid-run)
    memory_check: str = "refuse"
    export_shard_bytes: int = 5_000_000_000  # the final model's safetensors files hold at most this much each
    prefix_sharing: bool = True  # a prompt's responses in one packed sequence, prompt computed once (exact)
    attn_implementation: str = "auto"  # cheems.attention: auto (flex_attention on CUDA, sdpa on CPU), sdpa, ...
    eval_every: int = 0  # optimizer steps; 0 = at the end only
    eval_ece_bins: int = 5  # bins of the calibration error in evaluations during training
    save_every: int = 0  # optimizer steps; 0 = at the end only
    stop_after: int = 0  # stop after this many optimizer steps (simulates an interruption); 0 = never
    resume: bool = True  # continue from the latest checkpoint in out_dir if there is one
    progress: bool = True  # rank 0 shows a bar on a terminal, else a progress line every log_every steps
    log_every: int = 0  # optimizer steps between progress lines; 0 = about 20 lines per run
    trust_remote_code: bool = False
    # directory of the token cache (trainer.data.cache: files tokenized once, memory-mapped by every rank and run);
    # "" = CHEEMS_CACHE_DIR/tokens or ~/.cache/cheems/tokens; "off" = tokenize in memory every run
    token_cache: str = ""
    compile: bool = False  # torch.compile the model (off by default until it is faster on CPU and GPU alike)
    # where rank 0 reports the run (trainer.tracking), from the records metrics.jsonl gets (written either way):
    # tensorboard (OUT/tensorboard), mlflow, wandb, comma-separated, or none
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    tracking_uri: str = ""  # MLflow's store; "" = MLFLOW_TRACKING_URI, else sqlite:///<out_dir's parent>/mlflow.db
    experiment: str = "cheems"  # the MLflow experiment, the W&B project
    run_name: str = ""  # the run's name in MLflow and W&B; "" = out_dir's folder name

    def __post_init__(self) -> None:
        positive = ["max_length", "micro_batch_size", "grad_accum_steps", "eval_ece_bins"]
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.epochs > 0:  # written so NaN fails too
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if not self.lr >= 0:
            raise ValueError(f"lr must be >= 0 (0 = the default of full fine-tuning or of adapters), got {self.lr}")
        if self.log_every < 0:
            raise ValueError(f"log_every must be >= 0, got {self.log_every}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.train_format and self.train_format not in PARSERS:
            raise ValueError(f"train_format must be one of {', '.join(PARSERS)} (or empty), got {self.train_format!r}")
        if self.length_policy not in {p.value for p in LengthPolicy}:
            raise ValueError(f"length_policy must be drop, left or right, got {self.length_policy!r}")
        if self.max_tokens and self.max_tokens < self.max_length:
            raise ValueError(
                f"max_tokens {self.max_tokens} is below max_length {self.max_length}: a response as long as "
                "max_length would not fit a forward (raise max_tokens, lower max_length, or 0 for no budget)"
            )
        if self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0 (0 = no budget), got {self.max_tokens}")
        if self.cpu_offload and not self.fsdp:
            raise ValueError("cpu_offload needs fsdp=true (it offloads FSDP's shards)")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank must be >= 0 (0 = full fine-tuning), got {self.lora_rank}")
        if not self.lora_alpha >= 0:
            raise ValueError(f"lora_alpha must be >= 0 (0 = twice lora_rank), got {self.lora_alpha}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        for i, target in enumerate(self.lora_targets):
            if not isinstance(target, str) or not _MODULE_NAME.fullmatch(target):
                raise ValueError(f"lora_targets[{i}] must be a module name (q_proj, mlp.down_proj), got {target!r}")
            if target.rsplit(".", 1)[-1] in HEAD_NAMES:
                raise ValueError(f"lora_targets[{i}] {target!r} is the reward head: it is trained whole, not adapted")
        if self.load_in_4bit and not self.lora_rank:
            raise ValueError("load_in_4bit needs lora_rank > 0 (QLoRA trains adapters over a 4-bit base)")
        if self.memory_check not in MEMORY_CHECKS:
            raise ValueError(f"memory_check must be refuse or warn, got {self.memory_check!r}")
        if self.load_in_4bit and self.fsdp:
            raise ValueError(
                "load_in_4bit cannot run with fsdp=true: FSDP2's fully_shard turns bitsandbytes' Params4bit into plain "
                "tensors, losing their quantisation state (bitsandbytes-foundation/bitsandbytes#1945, "
                "huggingface/accelerate#3983); QLoRA runs on one GPU or under DDP (fsdp=false)"
            )
        if self.export_shard_bytes < 1:
            raise ValueError(f"export_shard_bytes must be >= 1, got {self.export_shard_bytes}")
        check_name(self.attn_implementation)  # a ConfigError, a ValueError naming the field
        if not self.reg_coef >= 0:
            raise ValueError(f"reg_coef must be >= 0, got {self.reg_coef}")
        self.report_to = backends(self.report_to)  # a ValueError naming the field

    @property
    def adapters(self) -> bool:
        """LoRA: adapters trained over a frozen base."""
        return self.lora_rank > 0

    @property
    def learning_rate(self) -> float:
        """The peak learning rate the optimizer takes: `lr`, or with lr=0 the mode's default (LORA_LR with adapters,
        FULL_LR otherwise). Resolved here, when it is used, so `--set lora_rank=16` and `--set lr=...` in any order
        (or a recipe's own choice of mode) never leave a full fine-tuning rate on adapters."""
        return self.lr or (LORA_LR if self.adapters else FULL_LR)

    @property
    def lora_scale_alpha(self) -> float:
        """lora_alpha as the adapters use it (0 = twice the rank)."""
        return self.lora_alpha or 2.0 * self.lora_rank

    def step_responses(self, world_size: int) -> int:
        """Responses per optimizer step under a token budget: global_batch_size, else micro x world x accum."""
        return self.global_batch_size or self.micro_batch_size * world_size * self.grad_accum_steps

    def forward_batch(self, world_size: int) -> int:
        """Responses per forward across all ranks, checked against global_batch_size when set."""
        size = self.micro_batch_size * world_size
        if self.max_tokens:  # forwards are cut by tokens; global_batch_size is the step's size, nothing to check
            return size
        if self.global_batch_size and self.global_batch_size != size * self.grad_accum_steps:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} != micro_batch_size {self.micro_batch_size} x "
                f"world size {world_size} x grad_accum_steps {self.grad_accum_steps}"
            )
        return size

    def with_overrides(self, assignments: list[str]) -> TrainConfig:
        """A copy with `key=value` assignments applied (lists as JSON or comma-separated)."""
        types = {f.name: f.type for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for assignment in assignments:
            key, sep, raw = assignment.partition("=")
            if not sep or key not in types:
                raise ValueError(f"--set {assignment!r}: expected key=value with key one of {sorted(types)}")
            changes[key] = _parse(raw, str(types[key]), key)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _parse(raw: str, kind: str, key: str) -> Any:
    try:
        if kind.startswith("list"):
            return json.loads(raw) if raw.startswith("[") else [x for x in raw.split(",") if x]
        if kind == "bool":
            if raw.lower() not in {"true", "false", "1", "0", "yes", "no"}:
                raise ValueError(raw)
            return raw.lower() in {"true", "1", "yes"}
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        return raw
    except ValueError:
        raise ValueError(f"--set {key}={raw!r}: not a valid {kind}") from None
