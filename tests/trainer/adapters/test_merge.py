"""The streaming merge (trainer.adapters.merge) in one process: the merged checkpoint holds a plain model's names
and shapes, loads in plain transformers and in our loader with the adapter-wrapped model's rewards, shards like
any export, leaves the trained model as it was, and refuses what it cannot merge. Under FSDP2: test_export."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from cheems.model import load_model
from tests.trainer.adapters.lora import SEQUENCES, lora_model, rewards
from trainer.adapters.merge import layout_of, merged_tensors
from trainer.distributed import World
from trainer.weights.export import INDEX, export_model

ONE = World(0, 1, 0, torch.device("cpu"))
Q = "model.layers.1.self_attn.q_proj"


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def wrapped(tiny: Path) -> tuple[Any, Any]:
    """(the PeftModel, its tokenizer); tests must not change it."""
    return lora_model(tiny, seed=4)


@pytest.fixture(scope="module")
def merged(wrapped: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    peft_model, tokenizer = wrapped
    out = tmp_path_factory.mktemp("merged") / "model"
    base = peft_model.base_model.model
    assert export_model(base, tokenizer, out, {"steps": 1}, ONE, tensors=merged_tensors(base)) == out
    return out


def test_the_export_holds_a_plain_models_names_and_shapes_and_no_peft(tiny: Path, merged: Path) -> None:
    plain = load_model(tiny)[0].state_dict()
    exported = load_file(merged / "model.safetensors")
    assert {n: tuple(t.shape) for n, t in exported.items()} == {n: tuple(t.shape) for n, t in plain.items()}
    config = json.loads((merged / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForSequenceClassification"]
    assert not [p.name for p in merged.iterdir() if "adapter" in p.name]
    assert "peft" not in (merged / "config.json").read_text()


def test_the_merged_weights_are_w_plus_scaled_b_a_and_the_trained_head(wrapped: tuple[Any, Any], merged: Path) -> None:
    """Computed here from the layer's own tensors: a merge that forgets B, the scaling or the head's copy fails."""
    base = wrapped[0].base_model.model
    state = base.state_dict()
    exported = load_file(merged / "model.safetensors")
    a, b = state[f"{Q}.lora_A.default.weight"], state[f"{Q}.lora_B.default.weight"]
    w = state[f"{Q}.base_layer.weight"]
    expected = w + (8 / 4) * b @ a
    torch.testing.assert_close(exported[f"{Q}.weight"], expected, rtol=0, atol=1e-6)
    assert (exported[f"{Q}.weight"] - w).abs().max() > 1e-2  # the delta is there, and large
    assert torch.equal(exported[f"{Q}.bias"], state[f"{Q}.base_layer.bias"])
    assert torch.equal(exported["score.weight"], state["score.modules_to_save.default.weight"])
    assert not torch.equal(exported["score.weight"], state["score.original_module.weight"])
    assert torch.equal(exported["model.norm.weight"], state["model.norm.weight"])


def test_transformers_and_our_loader_score_the_export_as_the_adapter_wrapped_model(
    wrapped: tuple[Any, Any], merged: Path, tiny: Path
) -> None:
    from transformers import AutoModelForSequenceClassification

    base = wrapped[0].base_model.model
    expected = rewards(base)
    assert max(abs(x - y) for x, y in zip(rewards(load_model(tiny)[0]), expected, strict=True)) > 1e-2
    hf = AutoModelForSequenceClassification.from_pretrained(merged, use_safetensors=True, dtype=torch.float32).eval()
    with torch.no_grad():
        plain = [float(hf(input_ids=torch.tensor([s])).logits[0, 0]) for s in SEQUENCES]
    assert plain == pytest.approx(expected, abs=1e-5)
    assert rewards(load_model(merged, strict=True)[0]) == pytest.approx(expected, abs=1e-5)
    assert rewards(base) == expected  # the export merged nothing into the trained model


def test_a_small_shard_size_gives_an_index_over_the_plain_names(wrapped: tuple[Any, Any], tmp_path: Path) -> None:
    peft_model, tokenizer = wrapped
    base = peft_model.base_model.model
    out = export_model(base, tokenizer, tmp_path / "model", None, ONE, 20_000, merged_tensors(base))
    assert out is not None
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(files) >= 3 and files[-1] == f"model-{len(files):05d}-of-{len(files):05d}.safetensors"
    index = json.loads((out / INDEX).read_text())["weight_map"]
    assert set(index) == set(load_model(out)[0].state_dict()) and set(index.values()) == set(files)
    assert rewards(load_model(out)[0]) == pytest.approx(rewards(base), abs=1e-5)


def test_a_bfloat16_base_is_merged_in_float32_and_stored_in_bfloat16(tiny: Path, wrapped: tuple[Any, Any]) -> None:
    peft_model, _ = lora_model(tiny, seed=4, tokenizer=wrapped[1])
    base = peft_model.base_model.model
    with torch.no_grad():
        layer = base.get_submodule(Q).base_layer
        layer.weight.data = layer.weight.data.to(torch.bfloat16)
    state = base.state_dict()
    out = dict(merged_tensors(base))
    a, b = state[f"{Q}.lora_A.default.weight"], state[f"{Q}.lora_B.default.weight"]
    expected = (state[f"{Q}.base_layer.weight"].float() + 2.0 * (b @ a)).to(torch.bfloat16)
    assert out[f"{Q}.weight"].dtype == torch.bfloat16 and torch.equal(out[f"{Q}.weight"], expected)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"use_dora": True}, "DoRA"), ({"target_modules": ["embed_tokens", "q_proj"]}, "only LoRA on linear layers")],
    ids=["dora", "embedding"],
)
def test_what_cannot_be_merged_is_refused_in_one_line(
    tiny: Path, wrapped: tuple[Any, Any], changes: dict[str, Any], message: str
) -> None:
    peft_model, _ = lora_model(tiny, tokenizer=wrapped[1], **changes)
    with pytest.raises(ValueError, match=message) as caught:
        layout_of(peft_model.base_model.model)
    assert "\n" not in str(caught.value)


def test_a_layer_already_merged_is_refused(tiny: Path, wrapped: tuple[Any, Any]) -> None:
    """Its W holds the delta already: merging again would add it twice."""
    peft_model, _ = lora_model(tiny, tokenizer=wrapped[1])
    peft_model.base_model.model.get_submodule(Q).merge()
    with pytest.raises(ValueError, match=f"{Q} .*merged into the weight already"):
        layout_of(peft_model.base_model.model)
