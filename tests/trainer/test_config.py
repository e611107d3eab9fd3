"""TrainConfig validation, --set overrides, the global batch check, and the recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import FULL_LR, LORA_LR, TrainConfig
from trainer.data import read_groups
from trainer.recipes import RECIPES, qwen25_paper, recipe

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("micro_batch_size", 0),
        ("max_length", 0),
        ("grad_accum_steps", 0),
        ("lr", -1e-5),
        ("epochs", 0),
        ("warmup_ratio", 1.0),
        ("warmup_ratio", -0.1),
        ("length_policy", "middle"),
        ("train_format", "csv"),
        ("reg_coef", -1.0),
        ("eval_ece_bins", 0),
        ("attn_implementation", "flash3"),
    ],
)
def test_invalid_values_raise_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [("lr", float("nan")), ("epochs", float("nan"))])
def test_nan_is_not_a_positive_value(field: str, value: float) -> None:
    # "lr must be > 0": NaN is not > 0, yet `value <= 0` is False for NaN, so it slips through
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})  # type: ignore[arg-type]


def test_edge_values_are_accepted() -> None:
    config = TrainConfig(warmup_ratio=0.0, reg_coef=0.0, length_policy="left", max_length=1, epochs=0.5)
    assert config.warmup_ratio == 0.0 and config.reg_coef == 0.0 and config.length_policy == "left"


def test_every_attention_name_is_taken_and_auto_is_the_default() -> None:
    assert TrainConfig().attn_implementation == "auto"
    for name in ("auto", "sdpa", "flex_attention", "eager", "flash_attention_2"):
        assert TrainConfig().with_overrides([f"attn_implementation={name}"]).attn_implementation == name


def test_overrides_parse_by_field_type() -> None:
    base = TrainConfig()
    config = base.with_overrides(
        [
            "micro_batch_size=4",
            "lr=1e-4",
            "epochs=3",
            "bf16=false",
            "fsdp=YES",
            "gradient_checkpointing=1",
            "model=out/models/小模型",
            "out_dir=a=b",
        ]
    )
    assert config.micro_batch_size == 4 and isinstance(config.micro_batch_size, int)
    assert config.lr == 1e-4
    assert config.epochs == 3.0 and isinstance(config.epochs, float)
    assert config.bf16 is False and config.fsdp is True and config.gradient_checkpointing is True
    assert config.model == "out/models/小模型"
    assert config.out_dir == "a=b"  # only the first '=' separates key and value
    assert base == TrainConfig()  # a copy: the original is unchanged
    assert config.reg_coef == base.reg_coef


def test_overrides_parse_lists_as_json_or_comma_separated() -> None:
    config = TrainConfig().with_overrides(['train_files=["a.jsonl", "数据/b.jsonl"]', "eval_files=x.jsonl,y.jsonl,"])
    assert config.train_files == ["a.jsonl", "数据/b.jsonl"]
    assert config.eval_files == ["x.jsonl", "y.jsonl"]
    assert TrainConfig().with_overrides(["eval_files="]).eval_files == []
    assert TrainConfig().with_overrides(["eval_files=only.jsonl"]).eval_files == ["only.jsonl"]


@pytest.mark.parametrize("assignment", ["nope=1", "micro_batch_size", "=3", "Lr=0.1"])
def test_overrides_reject_unknown_keys(assignment: str) -> None:
    with pytest.raises(ValueError, match="expected key=value") as info:
        TrainConfig().with_overrides([assignment])
    assert repr(assignment) in str(info.value)


@pytest.mark.parametrize(
    ("assignment", "key"),
    [
        ("micro_batch_size=two", "micro_batch_size"),
        ("max_length=2.5", "max_length"),
        ("lr=fast", "lr"),
        ("bf16=maybe", "bf16"),
        ("train_files=[not json", "train_files"),
    ],
)
def test_overrides_reject_bad_values_naming_the_key(assignment: str, key: str) -> None:
    with pytest.raises(ValueError, match=f"--set {key}="):
        TrainConfig().with_overrides([assignment])


@pytest.mark.parametrize(
    ("assignment", "field"),
    [("micro_batch_size=0", "micro_batch_size"), ("lr=-1", "lr"), ("length_policy=middle", "length_policy")],
)
def test_overrides_are_validated(assignment: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig().with_overrides([assignment])


def test_forward_batch_without_global_batch_is_micro_times_world() -> None:
    config = TrainConfig(micro_batch_size=3, grad_accum_steps=5)
    assert config.forward_batch(1) == 3
    assert config.forward_batch(4) == 12


def test_forward_batch_checks_the_global_batch_of_the_paper_recipe() -> None:
    config = qwen25_paper()
    assert config.global_batch_size == 256
    assert config.forward_batch(32) == 64  # 2 x 32, four accumulation steps make 256
    with pytest.raises(ValueError, match="global_batch_size 256") as info:
        config.forward_batch(8)
    assert "world size 8" in str(info.value)
    assert config.with_overrides(["grad_accum_steps=16"]).forward_batch(8) == 16


def test_unknown_recipe_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="nope") as info:
        recipe("nope")
    for name in RECIPES:
        assert name in str(info.value)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_is_a_valid_runnable_config(name: str) -> None:
    config = recipe(name)
    assert isinstance(config, TrainConfig)
    assert TrainConfig(**config.to_dict()) == config  # passes validation as a whole, not only field by field
    assert config.model and config.train_files and all(f.endswith(".jsonl") for f in config.train_files)
    assert all(f.endswith(".jsonl") for f in config.eval_files)
    assert 0 < config.learning_rate < 1e-2 and 0 < config.warmup_ratio < 0.5 and config.max_grad_norm > 0
    assert config.eval_every >= 0 and config.save_every >= 0 and config.stop_after == 0  # never stops early
    assert config.resume and not config.trust_remote_code
    fresh = recipe(name)  # a new object per call: editing one run's config leaves the recipe alone
    fresh.train_files.append("other.jsonl")
    assert recipe(name).train_files == config.train_files


def test_recipes_write_to_their_own_output_directories() -> None:
    # resume=True picks up the latest checkpoint in out_dir: a shared directory would mix two runs
    out_dirs = [RECIPES[name]().out_dir for name in RECIPES]
    assert len(set(out_dirs)) == len(out_dirs)


def test_paper_recipe_has_the_paper_hyperparameters() -> None:
    """Table 9 of the CheemsRM paper (Appendix F), Qwen2.5-72B-Instruct trained on CheemsPreference."""
    config = recipe("qwen25-paper")
    table9 = {
        "max_length": 2048,
        "reg_coef": 0.1,
        "grad_accum_steps": 4,
        "micro_batch_size": 2,
        "global_batch_size": 256,
        "epochs": 2,
        "warmup_ratio": 0.1,
        "learning_rate": 5e-6,
    }
    assert {key: getattr(config, key) for key in table9} == table9
    assert config.model == "Qwen/Qwen2.5-72B-Instruct"
    assert config.forward_batch(32) * config.grad_accum_steps == 256  # the 32 processes of the docstring
    assert config.margin == 0.0 and config.length_policy == "drop"  # plain BT loss, the official length rule
    assert config.bf16 and config.fsdp and config.gradient_checkpointing  # 72B only fits sharded, in bf16


def test_tiny_recipe_is_sized_for_a_cpu() -> None:
    config = recipe("tiny-cpu")
    assert not (config.bf16 or config.fsdp or config.gradient_checkpointing)  # fp32, one process, no sharding
    assert config.max_length <= 512 and config.global_batch_size == 0  # any world size, one process included
    assert config.forward_batch(1) == config.micro_batch_size <= 16
    assert config.model == "out/models/tiny"  # what `cheems init-model --out out/models/tiny` (make train) writes
    files = [ROOT / f for f in [*config.train_files, *config.eval_files]]
    assert all(f.is_relative_to(ROOT / "data" / "sample") and f.is_file() for f in files)  # bundled, no download
    responses = sum(len(g.responses) for f in config.train_files for g in read_groups(ROOT / f))
    steps = config.epochs * -(-responses // config.micro_batch_size) / config.grad_accum_steps
    assert 0 < steps <= 500  # minutes, not hours, on a laptop
    assert 0 < config.eval_every <= steps


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ([], ["tensorboard"]),  # the default: TensorBoard works offline
        (["report_to=none"], []),
        (["report_to="], []),
        (["report_to=MLflow,tensorboard,mlflow"], ["mlflow", "tensorboard"]),
        (['report_to=["wandb"]'], ["wandb"]),
    ],
)
def test_report_to_names_backends_or_none(given: list[str], kept: list[str]) -> None:
    assert TrainConfig().with_overrides(given).report_to == kept


@pytest.mark.parametrize(
    ("value", "said"), [("comet", "comet is not one of tensorboard, mlflow, wandb"), ("none,mlflow", "none goes alone")]
)
def test_report_to_refuses_unknown_backends_naming_the_field(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=f"report_to: {said}"):
        TrainConfig().with_overrides([f"report_to={value}"])


def test_lr_zero_is_the_default_of_the_mode_whatever_the_order_of_the_overrides() -> None:
    """lr=0 (the default) resolves when used: full fine-tuning's rate, or the adapters' once lora_rank is set, in
    either order of `--set`, and from a recipe that leaves lr to the mode (the paper's)."""
    assert TrainConfig().learning_rate == FULL_LR == 5e-6
    assert TrainConfig(lora_rank=8).learning_rate == LORA_LR > 10 * FULL_LR
    for order in (["lora_rank=16", "lr=0"], ["lr=0", "lora_rank=16"], ["lora_rank=16"]):
        assert TrainConfig().with_overrides(order).learning_rate == LORA_LR, order
    assert recipe("qwen25-paper").with_overrides(["lora_rank=16"]).learning_rate == LORA_LR
    for order in (["lora_rank=16", "lr=3e-5"], ["lr=3e-5", "lora_rank=16"]):  # a rate set by hand is the rate
        assert TrainConfig().with_overrides(order).learning_rate == 3e-5, order
    assert TrainConfig(lora_rank=16, lr=3e-5).with_overrides(["lora_rank=0"]).learning_rate == 3e-5


def test_qlora_with_fsdp_is_refused_in_one_line_naming_the_upstream_issue() -> None:
    with pytest.raises(ValueError, match=r"load_in_4bit cannot run with fsdp=true.*bitsandbytes#1945") as caught:
        TrainConfig(lora_rank=8, load_in_4bit=True, fsdp=True)
    assert "\n" not in str(caught.value)
