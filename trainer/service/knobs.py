"""What a StartTraining request may change: an allow-list of training knobs, never the host.

    request_overrides({"epochs": "2", "lr": "1e-5"}, bench_root)           # the same, checked
    request_overrides({"trust_remote_code": "true"}, bench_root)           # BadOverride naming the key
    request_overrides({"eval_files": '["open.jsonl"]'}, bench_root)        # names under bench_root -> their paths

Every TrainConfig field is classified here (a test keeps it so): a KNOB is a number, a switch or a policy of the
run (sizes, schedule, seed, prior, length policy, precision, sharding, adapters, how often to save and log,
and `memory_check=warn`, which risks the caller's own run only: a plan that does not fit goes on and may die
of CUDA out-of-memory. The check weighs a run against a card's total memory, not what is free, so it never
guarded other work on the same GPU; a Kubernetes job holds its GPUs alone); a field in
REFUSED reaches the service's host (a model directory or Hub id, `trust_remote_code`, a data file, an output
or cache folder) and only the service, or whoever configures it, sets it. Two keys are not TrainConfig fields:
`eval_files` in a request names bench files under the service's bench root (as the evaluation service's StartRun
does), turned into their paths here; `base_model` names a registered model (id or alias), which the service
resolves to the registry's path when it launches (`resolve_base_model`). The service's own overrides
(`TrainingConfig.overrides`, its auto trainings) are not requests and are not checked here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from cheems.errors import InvalidInput
from cheems.formats.benchfile import bench_file_under
from trainer.config import TrainConfig

BASE_MODEL = "base_model"  # a request's base model: a registered model's id or alias, never a path
EVAL_FILES = "eval_files"  # a request's bench files: names under the service's bench root
KNOBS = frozenset(
    {
        "train_format", "max_length", "length_policy", "micro_batch_size", "grad_accum_steps", "global_batch_size",
        "max_tokens", "epochs", "lr", "weight_decay", "warmup_ratio", "max_grad_norm", "reg_coef", "margin", "seed",
        "bf16", "gradient_checkpointing", "fsdp", "cpu_offload", "export_shard_bytes", "prefix_sharing",
        "attn_implementation", "eval_every", "eval_ece_bins", "save_every", "stop_after", "resume", "progress",
        "log_every", "compile", "report_to", "experiment", "run_name",
        "lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "load_in_4bit", "memory_check",
    }
)  # fmt: skip
REFUSED = {
    "model": f"the base model is the service's; name a registered model with {BASE_MODEL}=<model id>",
    "trust_remote_code": "it runs Python from the model's directory; models load without remote code",
    "train_files": "the service sets it to the dataset's file",
    "out_dir": "the service sets it to the training's folder",
    "token_cache": "it is a folder on the service's host",
    "tracking_uri": "the MLflow store is the service's (MLFLOW_TRACKING_URI in its environment)",
}
NAMED = frozenset({EVAL_FILES})  # path fields a request gives as names, turned into paths under a service folder


class BadOverride(InvalidInput):
    """A request's override of a key it may not set; the message names the key and what to do."""


def request_overrides(overrides: Mapping[str, str], bench_root: Path) -> dict[str, str]:
    """The request's overrides when every key is a knob (`eval_files` names turned into paths under `bench_root`,
    `base_model` kept for the service to resolve); BadOverride naming the first key (by name) that is not."""
    checked = {}
    for key, value in sorted(overrides.items()):  # the first refused key in name order (a proto map has no order)
        if key == EVAL_FILES:
            value = json.dumps([str(p) for p in bench_files(value, bench_root)])
        elif key != BASE_MODEL and key not in KNOBS:
            why = REFUSED.get(key, "it is no TrainConfig field a request may set")
            knobs = f"{', '.join(sorted(KNOBS))}, {BASE_MODEL}=<registered model id>, {EVAL_FILES}"
            raise BadOverride(f"overrides: {key} is not a training knob an operator may set ({why}); knobs: {knobs}")
        checked[key] = value
    return {key: checked[key] for key in overrides}


def bench_files(value: str, bench_root: Path) -> list[Path]:
    """`eval_files` (a JSON list or comma-separated) as files under `bench_root` (the rule of StartRun's bench files,
    `cheems.formats.benchfile.bench_file_under`); BadOverride naming the entry."""
    try:
        names = json.loads(value) if value.startswith("[") else [n for n in value.split(",") if n]
    except ValueError:
        raise BadOverride(f"overrides: {EVAL_FILES} is not a JSON list of bench file names: {value[:80]!r}") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadOverride(f"overrides: {EVAL_FILES} must be a list of bench file names")
    field = f"overrides: {EVAL_FILES}"
    return [bench_file_under(bench_root, name, f"{field}[{i}]", BadOverride) for i, name in enumerate(names)]


def unclassified() -> set[str]:
    """TrainConfig fields neither a knob nor refused (a new field must be classified before a request sets it)."""
    return {f.name for f in dataclasses.fields(TrainConfig)} - KNOBS - set(REFUSED) - NAMED
