"""A LoRA run's export (trainer.adapters.export): under FSDP2 with two real torchrun processes, where every tensor
is a sharded DTensor, the merged model and the adapter folder equal the one-process export byte for byte;
export_final takes this path when the run trains adapters; the merged model passes the check a model is
registered with (the lifecycle's, which loads it strictly and scores the probe), with the wrapped model's rewards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cheems.chat import Conversation, Truncation, encode_many
from cheems.model import load_model
from services.models.checkpoint import PROBE, check_checkpoint
from tests.trainer.adapters.lora import lora_model, rewards, trained
from trainer.adapters.export import export_lora, unquantized
from trainer.adapters.lora import attach
from trainer.config import TrainConfig
from trainer.distributed import World
from trainer.train import export_final

pytestmark = pytest.mark.slow  # torchrun
ONE = World(0, 1, 0, torch.device("cpu"))
ROOT = Path(__file__).resolve().parents[3]
SEED, SHARD_BYTES = 6, 40_000


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_two_fsdp2_processes_export_what_one_process_exports_byte_for_byte(tiny: Path, tmp_path: Path) -> None:
    peft_model, tokenizer = lora_model(tiny, SEED)
    one = tmp_path / "one"
    export_lora(peft_model.base_model.model, tokenizer, one, {"steps": 1}, ONE, SHARD_BYTES, str(tiny))
    two = tmp_path / "two"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "-m",
        "tests.trainer.adapters.sharded_export",
    ]
    run = subprocess.run(
        [*cmd, str(tiny), str(two), str(SEED), str(SHARD_BYTES)],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(list((one / "model").glob("model-*.safetensors"))) >= 2  # sharded: the index is compared too
    expected = files_of(one)
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(expected)
    assert files_of(two) == expected
    assert sorted(p.name for p in two.iterdir()) == ["adapter", "model"]  # no staging folder left


def test_export_final_merges_when_the_run_trains_adapters_and_the_lifecycle_takes_the_model(
    tiny: Path, tmp_path: Path
) -> None:
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("{}\n")
    config = TrainConfig(model=str(tiny), train_files=[str(train_file)], out_dir=str(tmp_path / "run"), lora_rank=4)
    model, tokenizer = load_model(tiny)
    base = attach(model, config)  # as the training run builds it
    trained(base, SEED)
    data: Any = SimpleNamespace(stats=SimpleNamespace(kept=1))
    model_dir = export_final(config, base, tokenizer, data, None, 3, ONE)
    assert model_dir == tmp_path / "run" / "model"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["adapter", "model"]
    conversations = [Conversation(PROBE[0], response) for response in PROBE[1]]
    probe = [e.input_ids for e in encode_many(tokenizer, conversations, 256, Truncation.LEFT)]
    assert check_checkpoint(str(model_dir)) == pytest.approx(rewards(base, probe), abs=1e-5)


def test_a_qlora_models_config_loses_its_quantization_before_the_merged_export(tiny: Path) -> None:
    """The merged weights are dequantized: a config still saying 4-bit would make transformers load them as such."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny)
    config.quantization_config = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    assert "quantization_config" in config.to_dict()
    unquantized(config)
    assert "quantization_config" not in config.to_dict() and config.num_labels == 1
