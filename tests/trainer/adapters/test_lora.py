"""LoRA (trainer.adapters.lora) on the tiny real-vocabulary RM: which parameters train, what the head is, how
targets are checked, and that a model built on the meta device and filled by name starts as a whole one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from cheems.errors import ConfigError
from cheems.forward import forward_rewards
from cheems.model import empty_model, head_of, load_model
from trainer.adapters.lora import attach, base_dtype, fresh_adapter, is_adapter, lora_config, plain_name
from trainer.config import TrainConfig

SEQUENCES = [[151644, 108386, 3837, 151645], [151644, 104169, 151645], [151644, 100, 200, 300, 151645]]


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


def lora(tiny: Path, tokenizer: Any, **changes: Any) -> Any:
    model, _ = load_model(tiny, tokenizer=tokenizer)
    return attach(model, TrainConfig(lora_rank=4, seed=3, **changes))


def test_one_backward_reaches_the_head_and_the_adapters_and_not_the_base(tiny: Path, tokenizer: Any) -> None:
    model = lora(tiny, tokenizer)
    with torch.no_grad():  # lora_B starts at zero: moved, so lora_A's gradient is not zero by construction
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.1)
    forward_rewards(model, SEQUENCES).pow(2).sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {n for n in grads if is_adapter(n)} | {"score.modules_to_save.default.weight"}
    for name in trained:
        assert grads[name] is not None and grads[name].abs().sum() > 0, name
    assert all(grads[n] is None for n in grads if n not in trained)  # the base, the original head: nothing
    linears = {n.split(".lora_A.")[0].rsplit(".", 1)[-1] for n in grads if ".lora_A." in n}
    assert linears == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert len([n for n in grads if ".lora_A." in n]) == 2 * 7  # every decoder linear of both layers


def test_the_head_is_the_trained_copy_and_the_model_starts_as_the_base(tiny: Path, tokenizer: Any) -> None:
    plain, _ = load_model(tiny, tokenizer=tokenizer)
    model = lora(tiny, tokenizer, lora_dropout=0.1)
    head = head_of(model)
    assert head is model.score.modules_to_save["default"] and head.weight.requires_grad
    torch.testing.assert_close(head.weight, plain.score.weight, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(
            forward_rewards(model.eval(), SEQUENCES), forward_rewards(plain.eval(), SEQUENCES), rtol=0, atol=1e-6
        )
        head.weight.add_(1.0)  # what runs is the trained copy
        assert not torch.allclose(forward_rewards(model, SEQUENCES), forward_rewards(plain, SEQUENCES))


def test_the_config_and_the_log_line_say_what_trains(
    tiny: Path, tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="trainer.adapters.lora"):
        model = lora(tiny, tokenizer, lora_alpha=0.0)
    config = lora_config(TrainConfig(lora_rank=4), model)  # after attach too: the targets as before
    assert (config.r, config.lora_alpha, config.task_type) == (4, 8.0, "SEQ_CLS")
    assert set(config.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert "score" in config.modules_to_save
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("LoRA r=4"))
    assert "alpha=8" in line and f"trainable {trainable:,} of {total:,} parameters" in line


def test_targets_name_decoder_linears_never_the_head(tiny: Path, tokenizer: Any) -> None:
    model = lora(tiny, tokenizer, lora_targets=["q_proj", "layers.1.mlp.down_proj"])
    adapted = sorted({n.split(".lora_A.")[0] for n, _ in model.named_parameters() if ".lora_A." in n})
    assert adapted == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.1.mlp.down_proj",
        "model.layers.1.self_attn.q_proj",
    ]
    with pytest.raises(ConfigError, match=r"lora_targets: .* names no linear layer") as caught:
        lora(tiny, tokenizer, lora_targets=["qproj"])
    assert "\n" not in str(caught.value)
    # the config refuses the head first
    with pytest.raises(ValueError, match=r"lora_targets\[0\] 'score' is the reward head"):
        lora(tiny, tokenizer, lora_targets=["score"])


def test_a_meta_model_filled_by_name_starts_as_the_whole_one(tiny: Path, tokenizer: Any) -> None:
    """What FSDP2's loader does (`trainer.weights.sharding.load_weights`): adapters from `fresh_adapter`, every
    other tensor from the checkpoint under its plain name; the same values `attach` gives a loaded model."""
    from safetensors.torch import load_file

    whole = lora(tiny, tokenizer)
    meta, _ = empty_model(tiny, tokenizer=tokenizer)
    meta = attach(meta, TrainConfig(lora_rank=4, seed=3))
    assert all(p.is_meta for p in meta.parameters())
    stored = load_file(tiny / "model.safetensors")
    meta.to_empty(device="cpu")
    with torch.no_grad():
        for name, tensor in meta.state_dict(keep_vars=True).items():
            value = fresh_adapter(name, tensor.shape, 3) if is_adapter(name) else stored.get(plain_name(name))
            if value is not None:
                tensor.copy_(value)
    expected = whole.state_dict()
    for name, tensor in meta.state_dict().items():
        if "rotary" not in name:
            torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)
    assert any(tensor.abs().sum() > 0 for n, tensor in expected.items() if ".lora_A." in n)


def test_over_a_bf16_base_the_trainable_parameters_are_float32(tiny: Path, tokenizer: Any) -> None:
    """On CUDA with bf16 the frozen base is built in bfloat16 (`base_dtype`) and FSDP2 wants one dtype for the
    trainable parameters of a group: the adapters and the head's copy are float32, the base stays bfloat16."""
    config = TrainConfig(lora_rank=4)
    assert base_dtype(config, torch.device("cuda")) == torch.bfloat16
    assert base_dtype(config, torch.device("cpu")) == base_dtype(TrainConfig(), torch.device("cuda")) == torch.float32
    meta, _ = empty_model(tiny, dtype=torch.bfloat16, tokenizer=tokenizer)
    attach(meta, config)
    dtypes = {p.requires_grad: set() for p in meta.parameters()}
    for param in meta.parameters():
        dtypes[param.requires_grad].add(param.dtype)
    assert dtypes == {True: {torch.float32}, False: {torch.bfloat16}}
