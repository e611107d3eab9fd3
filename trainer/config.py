"""The one configuration object of a training run. Recipes (`trainer.recipes`) return one.

`--set key=value` overrides a field from the command line; values are parsed by the field's type.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from cheems.attention import check_name
from cheems.formats.layouts import PARSERS
from trainer.data import LengthPolicy
from trainer.tracking.names import backends


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
    lr: float = 5e-6
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
        for name in ["epochs", "lr"]:
            if not getattr(self, name) > 0:  # written so NaN fails too
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
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
        if self.export_shard_bytes < 1:
            raise ValueError(f"export_shard_bytes must be >= 1, got {self.export_shard_bytes}")
        check_name(self.attn_implementation)  # a ConfigError, a ValueError naming the field
        if not self.reg_coef >= 0:
            raise ValueError(f"reg_coef must be >= 0, got {self.reg_coef}")
        self.report_to = backends(self.report_to)  # a ValueError naming the field

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
