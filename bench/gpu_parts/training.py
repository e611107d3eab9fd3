"""Part b: the training step's model FLOP utilisation, and its speed against the bare model's forward + backward.

`bench/train_bench.py`'s measurement at one setting, what `cheems train` runs by default (prefix sharing on, a
fixed micro-batch): `trainer.train` for one epoch of CheemsBench-like prompts (~100-token prompt, 5 responses of
~400), then the bare model (`forward_rewards` + the loss's backward over the same batches, no sampler, optimizer
or logging) in the same process. MFU is the trainer's own figure (`trainer.meter`: 6 x non-embedding parameters,
4 x them + 2 x the trained ones under LoRA, x sequence tokens a second over the card's dense bf16 peak), which it
gives on a CUDA card its table knows.
"""

from __future__ import annotations

import gc
from pathlib import Path

from gpu_parts.rows import Cell, missing
from gpu_parts.setting import Setting

# (prompts, responses a forward, responses a step): 12 steps on the card, 3 on the CPU
SIZES = {"cuda": (96, 10, 40), "cpu": (6, 5, 10)}


def measure(setting: Setting) -> dict[str, Cell]:
    import torch
    import train_bench
    from prefix_bench import SHAPES

    from cheems.model import load_model
    from cheems.precision import resolve_dtype

    prompts, micro, step = SIZES[setting.device]
    argv = ["--device", setting.device, "--prompts", str(prompts), "--micro-batch", str(micro), "--step", str(step)]
    args = train_bench.parse_args([*argv, *setting.shape_argv()])
    data = train_bench.write_bench(Path(setting.folder) / "training.jsonl", SHAPES["CheemsBench-like"], prompts)
    model, tokenizer = load_model(setting.model)
    model = model.to(setting.device).train()
    batches = train_bench.sample_forwards(data, tokenizer, args, 4)
    bare = train_bench.bare(model, batches, setting.device, resolve_dtype(args.dtype, setting.device), rounds=3)
    del model  # the trainer's copy alone on the device
    gc.collect()
    if setting.cuda:
        torch.cuda.empty_cache()
    records = train_bench.run_trainer(Path(setting.model), data, Path(setting.folder) / "training", args,
                                      {"prefix_sharing": True})  # fmt: skip
    per_step, rate = train_bench.steady(records)
    mfus = [r["mfu"] for r in records[1:] if "mfu" in r]
    where = f"{per_step:.3f} s a step of {step} responses, {rate:,.0f} tokens/s"
    if mfus:
        mfu = Cell(f"{sum(mfus) / len(mfus):.1%} ({where})", {"mfu": mfus, "seconds_per_step": per_step})
    elif setting.cuda:
        name = torch.cuda.get_device_name()
        mfu = missing(f"{name} is not in trainer.meter.PEAK_BF16 ({where})")
    else:
        mfu = missing(f"the CPU has no dense bf16 peak to measure against ({where})")
    versus = Cell(
        f"{rate / bare:.2f} ({rate:,.0f} / {bare:,.0f} tokens/s; prefix sharing on in the trainer)",
        {"trainer_tokens_per_s": rate, "bare_tokens_per_s": bare},
    )
    return {"train_mfu": mfu, "train_vs_bare": versus}
