"""The attention kernel: `auto` per device, explicit names, and one-line refusals naming what cannot run."""

from __future__ import annotations

import pytest
import torch

from cheems import attention
from cheems.attention import ATTENTIONS, resolve_attention
from cheems.errors import ConfigError


def one_line_refusal(name: str, device: str, training: bool = False) -> str:
    with pytest.raises(ConfigError) as caught:
        resolve_attention(name, device, training)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_auto_is_sdpa_on_the_cpu_and_names_it_can_run_are_taken_as_given() -> None:
    assert resolve_attention("auto", "cpu") == "sdpa"
    assert resolve_attention("auto", "cpu", training=True) == "sdpa"
    for name in ("sdpa", "eager", "flex_attention"):
        assert resolve_attention(name, "cpu") == name
    assert resolve_attention("eager", "cpu", training=True) == "eager"


def test_an_unknown_name_is_refused_naming_the_choices() -> None:
    message = one_line_refusal("flash3", "cpu")
    assert "'flash3' is not one of " + ", ".join(ATTENTIONS) in message


def test_training_through_flex_attention_on_the_cpu_is_refused() -> None:
    message = one_line_refusal("flex_attention", "cpu", training=True)
    assert "flex_attention cannot train on cpu" in message and f"torch {torch.__version__}" in message


def test_flash_attention_2_needs_the_package_and_a_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention, "has_flash_attention", lambda: False)
    assert "flash_attn package is not installed" in one_line_refusal("flash_attention_2", "cpu")
    monkeypatch.setattr(attention, "has_flash_attention", lambda: True)
    assert "flash_attention_2 cannot run on cpu: it needs a CUDA device" in one_line_refusal("flash_attention_2", "cpu")


def test_cuda_without_cuda_is_refused_naming_the_device() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert "device cuda:1: CUDA is not available" in one_line_refusal("auto", "cuda:1")


def test_auto_on_cuda_is_flex_attention_where_torch_compiles_it_else_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(attention, "has_flex_attention", lambda kind: True)
    assert resolve_attention("auto", "cuda") == "flex_attention"
    assert resolve_attention("flex_attention", "cuda", training=True) == "flex_attention"  # a GPU has its backward
    monkeypatch.setattr(attention, "has_flex_attention", lambda kind: False)
    assert resolve_attention("auto", "cuda:0") == "sdpa"
    assert "flex_attention cannot run on cuda:0: Triton" in one_line_refusal("flex_attention", "cuda:0")
    monkeypatch.setattr(attention, "has_flash_attention", lambda: True)
    assert resolve_attention("flash_attention_2", "cuda", training=True) == "flash_attention_2"
