"""Meta-device loading (trainer.sharding) equals a plain load; sharded export (trainer.export) loads in
transformers. In one process, on whole tensors: the sharded path (DTensors under torchrun) is in test_train."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from cheems.errors import ConfigError, ModelError
from cheems.forward import forward_rewards
from cheems.model import empty_model, load_model, save_model
from trainer import checkpoint
from trainer.distributed import World
from trainer.export import INDEX, export_model
from trainer.sharding import materialise
from trainer.tiny import tiny_config

ONE = World(0, 1, 0, torch.device("cpu"))
# two ChatML-ish sequences long enough for positions (the rotary embedding) to matter
SEQUENCES = [[151644, 8948, 198, 2610, 525, 264, 10950, 17847] * 4, [108386, 3837, 104, 151645] * 3]


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


def test_export_splits_into_shards_transformers_loads_and_writes_what_save_model_writes(
    tiny: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForSequenceClassification

    model, tokenizer = load_model(tiny)
    one = export_model(model, tokenizer, tmp_path / "one", {"steps": 3}, ONE)
    assert one is not None and sorted(p.name for p in one.glob("*.safetensors")) == ["model.safetensors"]
    shards = export_model(model, tokenizer, tmp_path / "shards", {"steps": 3}, ONE, max_shard_bytes=20_000)
    assert shards is not None
    files = sorted(p.name for p in shards.glob("*.safetensors"))
    assert len(files) >= 3 and files[0] == f"model-00001-of-{len(files):05d}.safetensors", files
    index = json.loads((shards / INDEX).read_text())
    assert set(index["weight_map"]) == set(model.state_dict()) and set(index["weight_map"].values()) == set(files)
    sizes = {f: sum(t.numel() * t.element_size() for t in load_file(shards / f).values()) for f in files}
    assert all(size <= 20_000 for f, size in sizes.items() if len(load_file(shards / f)) > 1), sizes
    loaded = AutoModelForSequenceClassification.from_pretrained(shards, use_safetensors=True).eval()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0, msg=name)
    save_model(model, tokenizer, tmp_path / "saved", {"steps": 3})
    companions = sorted(p.name for p in (tmp_path / "saved").iterdir() if p.suffix != ".safetensors")
    assert sorted(p.name for p in shards.iterdir() if p.suffix != ".safetensors" and p.name != INDEX) == companions
    for name in companions:
        assert (shards / name).read_text() == (tmp_path / "saved" / name).read_text(), name


def test_a_checkpoint_of_the_other_format_is_refused_before_anything_loads(tmp_path: Path) -> None:
    (tmp_path / checkpoint.POSITION).write_text(json.dumps({"step": 4, "epoch": 0, "batch": 4, "format": "sharded"}))
    with pytest.raises(ConfigError, match=r"is a sharded checkpoint .* resume with fsdp=true") as caught:
        checkpoint.load(tmp_path, None, None, None, sharded=False)
    assert "\n" not in str(caught.value)
    (tmp_path / checkpoint.POSITION).write_text(json.dumps({"step": 4, "epoch": 0, "batch": 4}))  # written before
    with pytest.raises(ConfigError, match=r"is a full checkpoint .* resume with fsdp=false"):
        checkpoint.load(tmp_path, None, None, None, sharded=True)
