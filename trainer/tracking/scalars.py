"""What a run reports, under which names: a step record of OUT/metrics.jsonl as scalars, the config as parameters.

    step_scalars({"step": 3, "loss": 0.61, "eval": {...}, ...})
    # {"train/loss": 0.61, ..., "eval/overall": 0.71, "eval/open/accuracy": 0.8, ...}
    run_params(config.to_dict(), {"data_sha256": "ab12...", "world_size": 2})
    # {"lr": "5e-06", "train_files": '["data/human.jsonl"]', ..., "data_sha256": "ab12..."}

Every backend logs these same names and values at the record's `step`, so a chart in TensorBoard, MLflow or W&B
is the column of metrics.jsonl it is named after. A value that is not a finite number (the accuracy of a step
without pairs) is left out rather than logged as NaN.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

# a step record's key -> the scalar's name (the record's other keys are counts and bookkeeping)
STEP: dict[str, str] = {
    "loss": "train/loss",
    "bt": "train/bt_loss",
    "reg": "train/reg",
    "accuracy": "train/accuracy",
    "margin": "train/margin",
    "reward_mean": "train/reward_mean",
    "reward_std": "train/reward_std",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "epoch": "train/epoch",
    "tokens_per_s": "perf/tokens_per_s",
    "seconds": "perf/seconds_per_step",
    "mfu": "perf/mfu",
    "memory_peak_bytes": "memory/peak_bytes",
    "memory_planned_bytes": "memory/planned_bytes",
}
SUBSET = ("accuracy", "exact_match", "ece")  # each CheemsBench subset's figures (evaluator.report.to_json)
PARAM_CHARS = 6000  # MLflow's longest parameter value; longer values are cut with a mark


def step_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's scalars by name, its CheemsBench evaluation (`eval`) included when it has one."""
    out = {name: float(record[key]) for key, name in STEP.items() if _finite(record.get(key))}
    evaluation = record.get("eval")
    if isinstance(evaluation, Mapping):
        out.update(eval_scalars(evaluation))
    return out


def eval_scalars(result: Mapping[str, Any]) -> dict[str, float]:
    """eval/overall and eval/<subset>/<figure> of a CheemsBench result as `evaluator.report.to_json` writes it."""
    out = {"eval/overall": float(result["overall"])} if _finite(result.get("overall")) else {}
    for subset, figures in (result.get("subsets") or {}).items():
        for figure in SUBSET:
            if _finite(figures.get(figure)):
                out[f"eval/{subset}/{figure}"] = float(figures[figure])
    return out


def run_params(config: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, str]:
    """The run's parameters as strings: every config field (lists and dicts as JSON) and `extra` (data hash, ...)."""
    return {key: _text(value) for key, value in {**config, **extra}.items()}


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= PARAM_CHARS else text[: PARAM_CHARS - 1] + "…"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
