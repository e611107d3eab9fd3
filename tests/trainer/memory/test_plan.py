"""The memory plan: the paper's 72B recipe at 32 and 8 GPUs through the command, the static rows equal to a real
model's tensors after an optimizer step, the activation formula against autograd's saved tensors, and the refusal
(ConfigError) of a run that cannot fit, from a directory holding a config.json and no weights."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cheems.errors import ConfigError
from cheems_cli.main import app
from trainer.config import TrainConfig
from trainer.memory import check
from trainer.memory.check import check_memory, plan_run
from trainer.memory.count import count_shape
from trainer.memory.estimate import layer_activation_bytes
from trainer.memory.shapes import known_shape, model_config

PAPER = ["train", "--recipe", "qwen25-paper", "--plan", "--nproc", "8", "--gpu-memory", "80"]


@pytest.fixture(scope="module")
def config_only(tiny_checkpoint: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the tiny model's config.json and nothing else: no weights, no tokenizer."""
    folder = tmp_path_factory.mktemp("config-only")
    shutil.copy(tiny_checkpoint() / "config.json", folder / "config.json")
    return folder


def test_the_paper_recipe_fits_32_gpus_and_not_8(tmp_path: Path) -> None:
    runner = CliRunner()
    fits = runner.invoke(app, [*PAPER, "--nnodes", "4", "--json", str(tmp_path / "plan.json")])
    assert fits.exit_code == 0, fits.output
    assert "32 GPUs (4 nodes x 8)" in fits.output and "fits" in fits.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    rows = {r["name"]: r["bytes"] for r in plan["rows"]}
    assert 71e9 < plan["parameters"] < 72e9  # Qwen2.5-72B without its lm_head, plus a scalar head
    assert rows["parameters"] == rows["gradients"] == -(-plan["parameters"] // 32) * 4  # fp32, sharded 32 ways
    assert plan["fits"] and plan["total_bytes"] < 80 * 1024**3 == plan["budget_bytes"]

    short = runner.invoke(app, [*PAPER, "--nnodes", "1"])
    assert short.exit_code == 1, short.output
    assert "does NOT fit" in short.output and "sharded 8 ways" in short.output
    assert "at least 21 GPUs (3 nodes of 8: --nnodes 3)" in short.output and "cpu_offload=true" in short.output


def test_the_static_rows_equal_a_real_models_tensors_after_a_step(tiny_checkpoint: Callable[..., Path]) -> None:
    from cheems.forward import forward_rewards
    from cheems.model import load_model
    from trainer.distributed import World
    from trainer.train import make_optimizer

    directory = tiny_checkpoint()
    config = TrainConfig(model=str(directory), bf16=False)
    model, _ = load_model(directory, training=True)
    optimizer = make_optimizer(model, config, World(0, 1, 0, torch.device("cpu")))
    rewards = forward_rewards(model, [[1, 2, 3, 4], [5, 6, 7]])
    (rewards[0] - rewards[1]).backward()
    optimizer.step()

    def size(tensors: list[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    plan = plan_run(config, world_size=1).plan
    assert plan.row("parameters") == size(list(model.parameters()))
    assert plan.row("gradients") == size([p.grad for p in model.parameters()])
    state = [t for s in optimizer.state.values() for t in s.values()]
    assert plan.row("optimizer") == size(state) and len(state) == 3 * len(list(model.parameters()))


def saved_bytes_per_layer_token(config: object, dtype: torch.dtype, tokens: int = 300) -> float:
    """Bytes autograd saves per token for one decoder layer (two layers' forward minus one's), weights excluded."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_config(config).to(dtype)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(1, 1000, (1, tokens))

    def saved() -> int:
        seen: dict[int, int] = {}

        def keep(t: torch.Tensor) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in weights:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            model(input_ids=ids)
        return sum(seen.values())

    two = saved()
    model.model.layers = model.model.layers[:1]
    return (two - saved()) / tokens


@pytest.mark.parametrize(("dtype", "fsdp"), [(torch.float32, False), (torch.bfloat16, True)])
def test_the_activation_formula_matches_what_autograd_saves(dtype: torch.dtype, fsdp: bool) -> None:
    from transformers import Qwen2Config

    config = Qwen2Config(
        hidden_size=128, intermediate_size=352, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2
    )
    config.vocab_size, config.num_labels, config.pad_token_id = 1000, 1, 0
    config._attn_implementation = "sdpa"
    measured = saved_bytes_per_layer_token(config, dtype)
    planned = layer_activation_bytes(count_shape(config), bf16=dtype == torch.bfloat16, fsdp=fsdp)
    assert planned == pytest.approx(measured, rel=0.03)


def test_a_run_that_cannot_fit_is_refused_before_anything_loads(
    config_only: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = TrainConfig(model=str(config_only), micro_batch_size=256, max_length=1024)
    assert check_memory(config, 1, "cpu") is None  # no GPU figure on the CPU: nothing to refuse
    assert check_memory(config, 1, "cpu", gpu_memory=8) is not None  # a directory with config.json only plans
    with pytest.raises(ConfigError, match=r"memory plan: .* needs 2.4 GiB a GPU .*micro_batch_size=80 "):
        check_memory(config, 1, "cpu", gpu_memory=1.5)  # activations 1.2 GiB + 1 GiB for the CUDA context

    result = CliRunner().invoke(app, ["train", "--set", f"model={config_only}", "--gpu-memory", "0.5"])
    assert result.exit_code == 2 and "error: memory plan:" in result.output  # not the missing weights

    from trainer.train import train  # on a GPU the budget is the device's: refused before load_model

    monkeypatch.setattr(check, "gpu_budget", lambda device, gib=None: 2**30)
    with pytest.raises(ConfigError, match="memory plan"):
        train(config)


def test_a_hub_id_plans_from_a_known_shape_or_a_resolved_directory(config_only: Path) -> None:
    assert known_shape("Qwen/Qwen2.5-7B-Instruct") == known_shape("qwen2.5-7b")
    assert known_shape("Qwen/Qwen2.5-72B-Instruct")[1].num_hidden_layers == 80  # type: ignore[index]
    assert model_config("Qwen/Qwen2.5-0.5B-Instruct", config_only)[1].endswith("config.json")  # resolved wins
    with pytest.raises(ConfigError, match="model 'someone/unknown-7b'"):
        model_config("someone/unknown-7b")


@pytest.mark.parametrize(
    ("name", "nproc", "kind"), [("qwen25-paper-lora", 8, "LoRA"), ("qwen25-paper-qlora", 1, "QLoRA")]
)
def test_the_adapter_recipes_fit_their_hardware(tmp_path: Path, name: str, nproc: int, kind: str) -> None:
    from trainer.memory.lora import lora_counts
    from trainer.recipes import recipe

    out = tmp_path / "plan.json"
    args = ["train", "--recipe", name, "--plan", "--nproc", str(nproc), "--gpu-memory", "80", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"{kind} r=16 on 7 linears a layer" in result.output and "fits" in result.output
    plan = json.loads(out.read_text())
    rows = {r["name"]: r["bytes"] for r in plan["rows"]}
    adapters = lora_counts(count_shape(model_config("Qwen/Qwen2.5-72B-Instruct")[0]), 16)
    assert plan["trainable"] == adapters.trainable and 200e6 < adapters.trainable < 220e6  # 80 layers x 7 linears
    assert plan["fits"] and plan["total_bytes"] <= 80 * 1024**3
    assert rows["parameters"] == 4 * -(-adapters.trainable // nproc)  # fp32 adapters + head, sharded with FSDP
    if kind == "QLoRA":
        assert 30 * 1024**3 < rows["frozen base"] < 40 * 1024**3 and "dequantised weight" in rows  # NF4
    else:
        assert rows["frozen base"] == 2 * -(-plan["parameters"] // 8)  # bf16, sharded 8 ways
    config = recipe(name)
    assert config.forward_batch(nproc) * config.grad_accum_steps == config.global_batch_size == 256


def test_a_refused_plan_names_the_override_which_warns_of_what_it_risks(
    config_only: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = TrainConfig(model=str(config_only), micro_batch_size=256, max_length=1024)
    with pytest.raises(ConfigError, match=r"to run anyway at the risk of CUDA out-of-memory: --set memory_check=warn"):
        check_memory(config, 1, "cpu", gpu_memory=1.5)

    warned = TrainConfig(model=str(config_only), micro_batch_size=256, max_length=1024, memory_check="warn")
    with caplog.at_level("WARNING", logger="trainer.memory.check"):
        run = check_memory(warned, 1, "cpu", gpu_memory=1.5)
    assert run is not None and run.plan.fits is False
    [record] = [r for r in caplog.records if r.name == "trainer.memory.check"]
    assert record.levelname == "WARNING"
    message = record.getMessage()
    assert "needs 2.4 GiB a GPU on 1 GPU(s), the GPU has 1.5 GiB (0.9 GiB over)" in message
    assert "memory_check=warn" in message
    assert "CUDA out-of-memory after the model has loaded, possibly mid-run" in message

    from trainer.train import train  # on a GPU: the warned run goes on past the plan, to loading the model

    monkeypatch.setattr(check, "gpu_budget", lambda device, gib=None: 2**30)
    caplog.clear()
    with caplog.at_level("WARNING", logger="trainer.memory.check"), pytest.raises(Exception) as failed:
        train(warned)
    assert "memory plan" not in str(failed.value)  # the config-only directory has no weights: loading fails
    assert any("going on because memory_check=warn" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="memory_check must be refuse or warn, got 'ignore'"):
        TrainConfig(memory_check="ignore")


def test_the_advice_for_adapters_offers_nf4_and_never_shards_it() -> None:
    from trainer.recipes import recipe

    lora = recipe("qwen25-paper-lora").with_overrides(["fsdp=false", "micro_batch_size=2", "grad_accum_steps=128"])
    run = plan_run(lora, world_size=1, budget=80 * 1024**3)  # a 145 GB bf16 base on one GPU
    assert not run.plan.fits and any("--set load_in_4bit=true" in fix for fix in run.fixes)
    qlora = plan_run(recipe("qwen25-paper-qlora"), world_size=1, budget=40 * 1024**3)  # NF4 alone is ~36 GiB
    assert not qlora.plan.fits and qlora.fixes and not any("fsdp" in fix for fix in qlora.fixes)
