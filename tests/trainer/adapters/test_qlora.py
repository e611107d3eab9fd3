"""QLoRA (trainer.adapters.qlora): refused in one line where it cannot run, before anything loads; its 4-bit
config is NF4 with double quantisation and bf16 compute. Training it needs a CUDA GPU and bitsandbytes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cheems.errors import ConfigError
from trainer.adapters import qlora
from trainer.config import TrainConfig
from trainer.train import train

QLORA = TrainConfig(lora_rank=8, load_in_4bit=True)


def test_off_cuda_it_is_refused_naming_the_gpu() -> None:
    with pytest.raises(ConfigError, match=r"load_in_4bit .* needs a CUDA GPU .* on cpu") as caught:
        qlora.check(QLORA, torch.device("cpu"))
    assert "\n" not in str(caught.value)
    qlora.check(TrainConfig(lora_rank=8), torch.device("cpu"))  # LoRA without 4-bit: nothing to refuse


def test_without_bitsandbytes_it_is_refused_naming_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # find_spec: None, as when not installed
    with pytest.raises(ConfigError, match=r"needs bitsandbytes.*pip install bitsandbytes==0\.50\.2") as caught:
        qlora.check(QLORA, torch.device("cuda"))  # the device is only a name here: no GPU is touched
    assert "\n" not in str(caught.value) and "cheems[qlora]" in str(caught.value)


def test_a_run_is_refused_before_anything_loads(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    config = TrainConfig(
        model=str(tiny_checkpoint()), train_files=["none.jsonl"], out_dir=str(tmp_path / "run"), lora_rank=8
    )
    config.load_in_4bit = True
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        train(config)
    assert not (tmp_path / "run").exists()


def test_the_base_is_nf4_double_quantised_computing_in_bf16_and_the_head_is_not() -> None:
    config = qlora.quantization()
    assert config.load_in_4bit and config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_use_double_quant
    assert config.bnb_4bit_compute_dtype == torch.bfloat16 and "score" in config.llm_int8_skip_modules
