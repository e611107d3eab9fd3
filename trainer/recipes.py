"""Training recipes: functions returning a TrainConfig. `cheems train --recipe NAME`."""

from __future__ import annotations

import dataclasses
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
        lr=0.0,  # the default of the mode: 5e-6, the paper's, fully tuned; LORA_LR with lora_rank set
        bf16=True,
        gradient_checkpointing=True,
        fsdp=True,
        eval_every=200,
        save_every=200,
    )


def qwen25_paper_lora() -> TrainConfig:
    """The paper's data and global batch on ONE node of 8 x 80 GB: LoRA r=16 on every linear of the decoder.

    The frozen bf16 base is sharded over the 8 GPUs with FSDP2 (about 17 GiB each), the adapters and the head
    train in fp32 (210M parameters, 3.4 GB of state with AdamW); `cheems train --recipe qwen25-paper-lora --plan
    --nproc 8 --gpu-memory 80` prints the plan. Global batch 256 responses = micro batch 4 x 8 processes x 8
    accumulation steps (the paper: 2 x 32 x 4). The learning rate is LoRA's (adapters learn from zero: 20x the
    full fine-tuning rate), the scale alpha / r = 2 (lora_alpha 0).
    """
    paper = qwen25_paper()
    return dataclasses.replace(
        paper,
        out_dir="out/qwen25-rm-lora",
        micro_batch_size=4,
        grad_accum_steps=8,
        lr=1e-4,
        lora_rank=16,
        lora_targets=[],
        fsdp=True,
        gradient_checkpointing=True,
    )


def qwen25_paper_qlora() -> TrainConfig:
    """The paper's data and global batch on ONE 80 GB GPU: QLoRA, the frozen base in NF4 (about 36 GiB).

    One process (QLoRA does not shard: no FSDP), LoRA r=16 on every linear of the decoder, the head trained
    whole. Global batch 256 responses = micro batch 2 x 1 process x 128 accumulation steps: the same optimizer
    steps as the paper's, each 128 forwards long. `cheems train --recipe qwen25-paper-qlora --plan --gpu-memory
    80` prints the plan.
    """
    return dataclasses.replace(
        qwen25_paper_lora(),
        out_dir="out/qwen25-rm-qlora",
        micro_batch_size=2,
        grad_accum_steps=128,
        fsdp=False,
        load_in_4bit=True,
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


RECIPES: dict[str, Callable[[], TrainConfig]] = {
    "qwen25-paper": qwen25_paper,
    "qwen25-paper-lora": qwen25_paper_lora,
    "qwen25-paper-qlora": qwen25_paper_qlora,
    "tiny-cpu": tiny_cpu,
}


def recipe(name: str) -> TrainConfig:
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[name]()
