"""Meta-device loading (trainer.weights.sharding) equals a plain load, rotary buffers and a chat model's missing
head included, and refuses a checkpoint that does not match the model or is cut short. In one process, on whole
tensors: the sharded (DTensor) path runs under torchrun in test_train."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from cheems.errors import ModelError
from cheems.forward import forward_rewards
from cheems.model import empty_model, load_model
from trainer.tiny import tiny_config
from trainer.weights.sharding import materialise

# two ChatML-ish sequences long enough for positions (the rotary embedding) to matter
SEQUENCES = [[151644, 8948, 198, 2610, 525, 264, 10950, 17847] * 4, [108386, 3837, 104, 151645] * 3]
UP = "model.layers.1.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A chat model's directory (a causal LM with tied embeddings: no lm_head saved, no reward head)."""
    from transformers import Qwen2ForCausalLM

    config = tiny_config(tokenizer, hidden_size=32, layers=2)
    config.tie_word_embeddings = True
    torch.manual_seed(5)
    directory = tmp_path_factory.mktemp("chat") / "lm"
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def meta_loaded(directory: Path, seed: int, tokenizer: Any) -> Any:
    model, _ = empty_model(directory, training=True, tokenizer=tokenizer)
    assert next(model.parameters()).is_meta
    materialise(model, directory, seed, torch.device("cpu"))
    return model.eval()


@pytest.mark.parametrize("which", ["reward model", "chat model"])
def test_a_model_built_on_meta_and_loaded_by_rows_equals_a_plain_load(
    tiny: Path, chat_model: Path, tokenizer: Any, which: str
) -> None:
    """Weights, the recomputed rotary buffers and the rewards; a chat model's missing head is the one a plain
    load makes up after torch.manual_seed(seed), as training seeds it."""
    directory = tiny if which == "reward model" else chat_model
    torch.manual_seed(7)
    plain = load_model(directory, training=True, tokenizer=tokenizer)[0].eval()
    meta = meta_loaded(directory, 7, tokenizer)
    assert plain.state_dict().keys() == meta.state_dict().keys()
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(meta.state_dict()[name], value, rtol=0, atol=0, msg=name)
    for name, buffer in plain.named_buffers():  # not in the state dict: recomputed, not left as garbage
        torch.testing.assert_close(dict(meta.named_buffers())[name], buffer, rtol=0, atol=0, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(
            forward_rewards(meta, SEQUENCES), forward_rewards(plain, SEQUENCES), atol=1e-5, rtol=0
        )


def test_a_checkpoint_missing_backbone_weights_is_refused(tiny: Path, tokenizer: Any, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    weights = load_file(broken / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"not in its safetensors files \(model.layers.1.mlp.up_proj.weight\)"):
        meta_loaded(broken, 0, tokenizer)


def altered(tiny: Path, tmp_path: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    """A copy of `tiny` whose weights `change` edited (in place) before they are saved again."""
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    weights = load_file(broken / "model.safetensors")
    change(weights)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    return broken


def test_a_shard_cut_short_is_refused_naming_the_file_and_the_tensor_not_read_as_zeros(
    tiny: Path, tokenizer: Any, tmp_path: Path
) -> None:
    broken = altered(tiny, tmp_path, lambda weights: None)
    file = broken / "model.safetensors"
    with file.open("rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    header.pop("__metadata__", None)
    last = max(header, key=lambda key: header[key]["data_offsets"][1])  # the tensor stored at the file's end
    os.truncate(file, file.stat().st_size - 100)  # a copy that stopped early
    with pytest.raises(ModelError, match="cut short") as caught:
        meta_loaded(broken, 0, tokenizer)
    assert f"{file}: tensor {last} " in str(caught.value)


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda w: w.update({UP: w[UP][:32]}), "stored with shape [32, 32], the model's is [64, 32]"),
        (lambda w: w.update({UP: w[UP].to(torch.int32)}), "stored as I32 (torch.int32), the model's is torch.float32"),
    ],
    ids=["shape", "dtype"],
)
def test_a_stored_tensor_of_another_shape_or_dtype_is_refused_naming_both(
    tiny: Path, tokenizer: Any, tmp_path: Path, change: Callable[[dict[str, torch.Tensor]], None], found: str
) -> None:
    """Not read as the neighbour's bytes (a shorter tensor) or as floats (an integer one)."""
    broken = altered(tiny, tmp_path, change)
    with pytest.raises(ModelError) as caught:
        meta_loaded(broken, 0, tokenizer)
    assert str(caught.value).startswith(f"{broken / 'model.safetensors'}: tensor {UP} "), caught.value
    assert found in str(caught.value)


def test_a_bfloat16_checkpoint_loads_into_the_float32_model_converted(
    tiny: Path, tokenizer: Any, tmp_path: Path
) -> None:
    """Floating dtypes differing is no mismatch: real checkpoints are bfloat16, the model trains in float32."""
    halved = altered(tiny, tmp_path, lambda w: w.update({k: v.to(torch.bfloat16) for k, v in w.items()}))
    meta = meta_loaded(halved, 0, tokenizer)
    for name, value in load_file(halved / "model.safetensors").items():
        torch.testing.assert_close(meta.state_dict()[name], value.float(), rtol=0, atol=0, msg=name)
