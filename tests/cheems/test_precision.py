"""The dtype a model runs in: `auto` per device, explicit names (checked in one place, torch-free), and refusals
that name what cannot run."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cheems import precision
from cheems.errors import ConfigError
from cheems.precision import DTYPES, check_dtype, dtype_name, planned_dtype, resolve_dtype


def test_auto_is_float32_on_the_cpu_and_names_are_taken_as_given() -> None:
    assert resolve_dtype("auto", "cpu") is torch.float32
    for name in ("bfloat16", "float16", "float32"):
        assert dtype_name(resolve_dtype(name, "cpu")) == name


def test_an_unknown_name_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="dtype must be one of auto, bfloat16, float16, float32, got 'fp8'"):
        resolve_dtype("fp8", "cpu")
    with pytest.raises(ConfigError, match="'half'"):
        planned_dtype("half", "cuda")


def test_cuda_without_cuda_is_refused_in_one_line_naming_the_device() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for name in ("auto", "bfloat16", "float32"):
        with pytest.raises(ConfigError) as caught:
            resolve_dtype(name, "cuda:1")
        assert "device cuda:1: CUDA is not available" in str(caught.value) and "\n" not in str(caught.value)


class FakeCard:
    """torch.cuda as a card with or without bfloat16 (an A100 / a V100) would answer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, bf16: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
        monkeypatch.setattr(precision, "_probe", lambda dtype, device: None)  # no real card to run on


def test_auto_on_cuda_is_bfloat16_where_the_card_has_it_else_float16(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(monkeypatch, bf16=True)
    assert resolve_dtype("auto", "cuda") is torch.bfloat16
    FakeCard(monkeypatch, bf16=False)
    assert resolve_dtype("auto", "cuda") is torch.float16


def test_bfloat16_on_a_card_without_it_is_refused_naming_the_card(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(monkeypatch, bf16=False)
    with pytest.raises(ConfigError, match=r"bfloat16 cannot run on cuda \(Tesla V100-SXM2-32GB\): use --dtype float16"):
        resolve_dtype("bfloat16", "cuda")
    assert resolve_dtype("float16", "cuda") is torch.float16


def test_a_dtype_the_device_fails_to_compute_in_is_refused_with_the_devices_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_half(*args: object, **kwargs: object) -> None:
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'\nmore lines")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_half)
    with pytest.raises(ConfigError, match=r"^dtype float16 cannot run on cpu: .*not implemented for 'Half'$"):
        resolve_dtype("float16", "cpu")


def test_an_export_for_another_machine_plans_the_dtype_without_the_device() -> None:
    assert planned_dtype("auto", "cuda") == "bfloat16"  # no GPU here, and none needed to plan for one
    assert planned_dtype("auto", "cpu") == "float32"
    assert planned_dtype("float16", "cuda:0") == "float16"


def test_dtype_names_are_checked_in_one_place() -> None:
    assert [check_dtype(name) for name in DTYPES] == ["auto", "bfloat16", "float16", "float32"]
    for name in ("fp8", "Float32", "torch.float32", "half", ""):
        with pytest.raises(ValueError, match=rf"^supervision_dtype must be one of auto, .*, got '{name}'$"):
            check_dtype(name, "supervision_dtype")


def test_the_names_come_without_torch() -> None:
    """A config that only names a dtype (the training service's) checks it here without importing torch (it kept a
    list of its own while torch came with this module)."""
    code = "import sys, cheems.precision, trainer.service.config; print([m for m in sys.modules if 'torch' in m])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == "[]"
