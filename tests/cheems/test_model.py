"""Checkpoints: head initialisation, safetensors-only loading, and official v_head conversion."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cheems.chat import Conversation, encode
from cheems.errors import ConfigError, ModelError
from cheems.forward import forward_rewards
from cheems.model import convert_v_head, head_of, init_head, load_model
from trainer.tiny import build_model, build_tokenizer, tiny_config


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return build_tokenizer()


def test_head_is_bias_free_and_initialised_with_std_one_over_hidden_plus_one(tokenizer) -> None:  # type: ignore[no-untyped-def]
    model = build_model(tokenizer, hidden_size=32, layers=1, seed=3)
    head = head_of(model)
    assert head.bias is None and head.weight.shape == (1, 32)
    expected = torch.randn((1, 32), generator=torch.Generator().manual_seed(3)) / 33
    torch.testing.assert_close(head.weight.detach(), expected)
    init_head(model, seed=4)
    assert not torch.equal(head.weight.detach(), expected)


def test_pickled_checkpoints_are_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    torch.save({"w": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelError, match=r"pickled \.bin checkpoints are refused"):
        load_model(tmp_path)


def official_checkpoint(tokenizer, directory: Path, with_v_head: bool = True) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """A CheemsRM-style checkpoint: a causal LM's weights plus v_head.weight, in safetensors."""
    from transformers import Qwen2ForCausalLM

    config = tiny_config(tokenizer, hidden_size=32, layers=1)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    weights = load_file(directory / "model.safetensors")
    v_head = torch.randn(1, 32)
    if with_v_head:
        weights["v_head.weight"] = v_head
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
    return v_head


def test_official_v_head_checkpoint_converts_to_sequence_classification(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from transformers import Qwen2Model

    v_head = official_checkpoint(tokenizer, tmp_path / "official")
    out = convert_v_head(tmp_path / "official", tmp_path / "converted")
    model, tok = load_model(out)
    torch.testing.assert_close(head_of(model).weight.detach(), v_head)
    ids = encode(tok, Conversation("你好", "你好！")).input_ids
    backbone = Qwen2Model.from_pretrained(tmp_path / "official").eval()
    with torch.no_grad():
        hidden = backbone(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        expected = (hidden @ v_head[0]).item()
        got = forward_rewards(model.eval(), [ids]).item()
    assert got == pytest.approx(expected, abs=1e-5)


def test_conversion_without_v_head_is_a_clear_error(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    official_checkpoint(tokenizer, tmp_path / "plain", with_v_head=False)
    with pytest.raises(ModelError, match=r"no v_head\.weight"):
        convert_v_head(tmp_path / "plain", tmp_path / "converted")


def test_the_attention_implementation_is_resolved_for_the_device_and_refused_before_loading(
    tiny_checkpoint: Callable[..., Path],
) -> None:
    path = tiny_checkpoint()
    assert load_model(path)[0].config._attn_implementation == "sdpa"  # auto on the CPU
    assert load_model(path, attn_implementation="eager")[0].config._attn_implementation == "eager"
    flex, _ = load_model(path, attn_implementation="flex_attention")  # scoring: no gradients
    assert flex.config._attn_implementation == "flex_attention"
    with pytest.raises(ConfigError, match="flex_attention cannot train on cpu"):
        load_model(path, attn_implementation="flex_attention", training=True)
    with pytest.raises(ConfigError, match="'flash' is not one of"):
        load_model(path, attn_implementation="flash")
