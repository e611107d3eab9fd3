"""Training recipes: functions returning a TrainConfig. `cheems train --recipe NAME`."""

from __future__ import annotations

from collections.abc import Callable

from trainer.config import TrainConfig


def qwen25_paper() -> TrainConfig:
    """The paper's Table 9 settings (Qwen2.5-72B-Instruct RM on CheemsPreference, 32 GPUs).

    Global batch 256 responses = micro batch 2 x 32 processes x 4 accumulation steps; set `model`
    and `train_files` for your run.
    """
    return TrainConfig(
        model="Qwen/Qwen2.5-72B-Instruct",
        train_files=["data/cheems_preference.jsonl"],
        eval_files=["data/cheems_bench/open.jsonl", "data/cheems_bench/human.jsonl"],
        out_dir="out/qwen25-rm",
        max_length=2048,
        reg_coef=0.1,
        grad_accum_steps=4,
        micro_batch_size=2,
        global_batch_size=256,
        epochs=2,
        warmup_ratio=0.1,
        lr=5e-6,
        bf16=True,
        gradient_checkpointing=True,
        fsdp=True,
        eval_every=200,
        save_every=200,
    )


def tiny_cpu() -> TrainConfig:
    """The tiny Qwen2 RM (`cheems init-model`) on the bundled sample: minutes on a laptop CPU."""
    return TrainConfig(
        model="out/models/tiny",
        train_files=["data/sample/open.jsonl"],
        eval_files=["data/sample/human.jsonl"],
        out_dir="out/train-tiny",
        max_length=512,
        micro_batch_size=10,
        grad_accum_steps=1,
        epochs=20,
        lr=2e-3,
        warmup_ratio=0.1,
        reg_coef=0.1,
        eval_every=20,
        bf16=False,
    )


RECIPES: dict[str, Callable[[], TrainConfig]] = {"qwen25-paper": qwen25_paper, "tiny-cpu": tiny_cpu}


def recipe(name: str) -> TrainConfig:
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[name]()
