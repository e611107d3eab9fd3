"""A StartTraining request's overrides: training knobs only. The issue's row 6 (an operator's `model` and
`trust_remote_code` ran their Python in the trainer) and every other way a request reached the host."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainer.config import TrainConfig
from trainer.service.knobs import KNOBS, REFUSED, BadOverride, request_overrides, unclassified


@pytest.fixture
def bench_root(tmp_path: Path) -> Path:
    root = tmp_path / "bench"
    root.mkdir()
    (root / "open.jsonl").write_text("{}\n")
    (tmp_path / "secret.jsonl").write_text("{}\n")
    return root


def test_every_train_config_field_is_classified() -> None:
    assert unclassified() == set()
    assert not KNOBS & set(REFUSED)
    assert {"model", "trust_remote_code", "train_files", "out_dir", "token_cache"} <= set(REFUSED)


def test_knobs_pass_unchanged(bench_root: Path) -> None:
    overrides = {"epochs": "2", "lr": "1e-5", "seed": "3", "length_policy": "left", "reg_coef": "0", "fsdp": "true"}
    assert request_overrides(overrides, bench_root) == overrides
    assert request_overrides({"base_model": "rm-1"}, bench_root) == {"base_model": "rm-1"}  # resolved at launch


@pytest.mark.parametrize("key", sorted({*REFUSED, "epoch", "compile_fn", ""}))
def test_anything_else_is_refused_naming_the_key(bench_root: Path, key: str) -> None:
    with pytest.raises(BadOverride, match=rf"^overrides: {key} is not a training knob an operator may set"):
        request_overrides({"epochs": "1", key: "x"}, bench_root)


def test_trust_remote_code_and_a_model_directory_are_refused(bench_root: Path) -> None:
    for key, value in (("trust_remote_code", "true"), ("model", str(bench_root))):
        with pytest.raises(BadOverride, match=f"overrides: {key} is not a training knob"):
            request_overrides({key: value}, bench_root)
    both = {"trust_remote_code": "true", "model": str(bench_root)}  # the row 6: the first by name is named
    with pytest.raises(BadOverride, match=r"^overrides: model is not a training knob an operator may set"):
        request_overrides(both, bench_root)


def test_eval_files_are_names_under_the_bench_root(bench_root: Path) -> None:
    path = str((bench_root / "open.jsonl").resolve())
    assert request_overrides({"eval_files": '["open.jsonl"]'}, bench_root) == {"eval_files": json.dumps([path])}
    assert request_overrides({"eval_files": "open.jsonl"}, bench_root) == {"eval_files": json.dumps([path])}
    assert request_overrides({"eval_files": ""}, bench_root) == {"eval_files": "[]"}


@pytest.mark.parametrize(
    "value",
    ["../secret.jsonl", '["open.jsonl", "../secret.jsonl"]', "/etc/passwd", '["."]', '["a\\u0000b"]', "absent.jsonl",
     '{"a": 1}', "[1]", "[not json", "a" * 300],
)  # fmt: skip
def test_eval_files_elsewhere_are_refused(bench_root: Path, value: str) -> None:
    with pytest.raises(BadOverride, match=r"^overrides: eval_files"):
        request_overrides({"eval_files": value}, bench_root)


def test_a_symlink_out_of_the_bench_root_is_refused(bench_root: Path) -> None:
    (bench_root / "link.jsonl").symlink_to(bench_root.parent / "secret.jsonl")
    with pytest.raises(BadOverride, match=r"eval_files\[0\]"):
        request_overrides({"eval_files": "link.jsonl"}, bench_root)


def test_the_knobs_are_train_config_fields() -> None:
    assert {f.name for f in dataclasses.fields(TrainConfig)} >= KNOBS


LORA = {
    "lora_rank": "16",
    "lora_alpha": "32",
    "lora_dropout": "0.05",
    "lora_targets": "q_proj,v_proj",
    "load_in_4bit": "true",
    "memory_check": "warn",
}


def test_the_adapter_knobs_and_the_memory_override_are_knobs(bench_root: Path) -> None:
    from trainer.service.trainings import check_request

    assert request_overrides(LORA, bench_root) == LORA
    check_request("tiny-cpu", dict(LORA))  # values a TrainConfig takes


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("lora_rank", "-1", "lora_rank must be >= 0"),
        ("lora_rank", "sixteen", "--set lora_rank='sixteen': not a valid int"),
        ("lora_alpha", "nan", "lora_alpha must be >= 0"),
        ("lora_dropout", "1", r"lora_dropout must be in \[0, 1\)"),
        ("lora_targets", "q_proj,../x", r"lora_targets\[1\] must be a module name"),
        ("lora_targets", '["score"]', r"lora_targets\[0\] 'score' is the reward head"),
        ("lora_targets", "[1]", r"lora_targets\[0\] must be a module name"),
        ("load_in_4bit", "maybe", "--set load_in_4bit='maybe': not a valid bool"),
        ("memory_check", "off", "memory_check must be refuse or warn"),
    ],
)
def test_a_bad_adapter_value_is_refused_naming_the_knob(key: str, value: str, message: str) -> None:
    from trainer.service.trainings import BadTrainingRequest, check_request

    overrides = {"lora_rank": "8", key: value}
    with pytest.raises(BadTrainingRequest, match=rf"^overrides: {message}"):
        check_request("tiny-cpu", overrides)
