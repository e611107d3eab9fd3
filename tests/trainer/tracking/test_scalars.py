"""The names a run's figures get in every backend, and its parameters as strings."""

from __future__ import annotations

import json

from trainer.tracking.scalars import PARAM_CHARS, run_params, step_scalars


def test_a_step_record_becomes_named_scalars_without_its_counts_or_nan() -> None:
    record = {
        "step": 4, "total_steps": 9, "epoch": 0, "lr": 1e-3, "grad_norm": 0.5, "loss": 0.6, "bt": 0.55, "reg": 0.5,
        "accuracy": float("nan"), "margin": 0.2, "reward_mean": -0.1, "reward_std": 0.3, "pairs": 0, "tokens": 500,
        "responses": 10, "forwards": 1, "memory_peak_bytes": 1 << 30, "seconds": 0.25, "tokens_per_s": 2000.0,
        "tracking": {"tensorboard": "/x"}, "startup": {"total": 3.0},
    }  # fmt: skip
    assert step_scalars(record) == {
        "train/lr": 1e-3, "train/grad_norm": 0.5, "train/loss": 0.6, "train/bt_loss": 0.55, "train/reg": 0.5,
        "train/margin": 0.2, "train/reward_mean": -0.1, "train/reward_std": 0.3, "train/epoch": 0.0,
        "memory/peak_bytes": float(1 << 30), "perf/seconds_per_step": 0.25, "perf/tokens_per_s": 2000.0,
    }  # fmt: skip


def test_an_evaluation_adds_overall_and_each_subsets_figures() -> None:
    evaluation = {
        "semantics": "paper",
        "overall": 0.7,
        "subsets": {
            "open": {"accuracy": 0.8, "exact_match": 0.6, "ece": None, "prompts": 3, "per_category": {}},
            "human": {"accuracy": 0.75, "exact_match": 0.5, "ece": 0.1, "prompts": 2, "per_category": {}},
        },
    }
    got = step_scalars({"step": 9, "loss": 0.4, "eval": evaluation})
    assert got == {
        "train/loss": 0.4, "eval/overall": 0.7, "eval/open/accuracy": 0.8, "eval/open/exact_match": 0.6,
        "eval/human/accuracy": 0.75, "eval/human/exact_match": 0.5, "eval/human/ece": 0.1,
    }  # fmt: skip


def test_params_are_strings_lists_as_json_and_long_values_cut() -> None:
    config = {"lr": 5e-6, "train_files": ["a.jsonl", "中文.jsonl"], "bf16": True, "model": "m", "long": "x" * 7000}
    params = run_params(config, {"data_sha256": "ab" * 32, "world_size": 2})
    assert params["lr"] == "5e-06" and json.loads(params["train_files"]) == ["a.jsonl", "中文.jsonl"]
    assert params["bf16"] == "true" and params["model"] == "m" and params["world_size"] == "2"
    assert params["data_sha256"] == "ab" * 32
    assert len(params["long"]) == PARAM_CHARS and params["long"].endswith("…")
