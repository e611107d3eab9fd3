"""Parts d and e: LoRA and QLoRA against full fine-tuning, peak memory and seconds a step, on the same batches.

Three runs of `trainer.train` on the same CheemsBench-like data and model, each in a process of its own
(`bench/train_run.py`: a peak is a process's): full fine-tuning (the baseline), LoRA of rank 16 on every linear of
the decoder (`lora_rank=16`, the trainer's defaults otherwise), and QLoRA (the same over an NF4 base,
`load_in_4bit`; CUDA with bitsandbytes only). Each row is the adapter run's figure over the baseline's. A row
says why it has no figure: LoRA training not in this tree (`trainer.adapters`), bitsandbytes not installed, the
CPU, or the run's own error line.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from gpu_parts.rows import Cell, gib, missing, ratio
from gpu_parts.setting import Setting

RANK = 16
# (prompts, responses a forward, max_length): 16 steps of 20 responses on the card, 3 of 10 on the CPU
SIZES = {"cuda": (64, 10, 1024), "cpu": (6, 10, 1536)}


def config_of(setting: Setting, data: Path, name: str, **changes: Any) -> dict[str, Any]:
    """TrainConfig's fields for one run: one epoch over `data`, no evaluation, no tracking, no token cache."""
    _, micro, length = SIZES[setting.device]
    return {
        "model": setting.model,
        "train_files": [str(data)],
        "out_dir": str(Path(setting.folder) / "adapters" / name),
        "max_length": length,
        "micro_batch_size": micro,
        "grad_accum_steps": 2 if setting.cuda else 1,
        "epochs": 1.0,
        "bf16": True,
        "progress": False,
        "log_every": 4,
        "report_to": [],
        "token_cache": "off",
        "seed": 0,
        **changes,
    }


def why_no_lora() -> str:
    """Why LoRA cannot train here, or "" when it can."""
    if importlib.util.find_spec("trainer.adapters") is None:
        return "LoRA training (trainer.adapters) is not in this tree yet"
    return ""


def why_no_qlora(setting: Setting) -> str:
    if not setting.cuda:
        return "QLoRA needs CUDA (load_in_4bit: bitsandbytes' NF4 kernels), this run is on the CPU"
    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes not installed"
    return why_no_lora()


def measure(setting: Setting, budget: float) -> dict[str, Cell]:
    """The three runs within `budget` seconds: the baseline first, then each adapter run in what is left."""
    import train_bench
    from prefix_bench import SHAPES
    from train_run import in_child

    skip = {"lora": why_no_lora(), "qlora": why_no_qlora(setting)}
    if skip["lora"] and skip["qlora"]:  # no adapter run: the baseline would be measured for nothing
        lora = missing(skip["lora"])
        return {"lora_memory": lora, "lora_time": lora, "qlora": missing(skip["qlora"])}
    deadline = time.monotonic() + budget
    prompts = SIZES[setting.device][0]
    data = train_bench.write_bench(Path(setting.folder) / "adapters.jsonl", SHAPES["CheemsBench-like"], prompts)
    runs = {"full": {}, "lora": {"lora_rank": RANK}, "qlora": {"lora_rank": RANK, "load_in_4bit": True}}
    shares = {"full": 0.4, "lora": 0.6, "qlora": 1.0}  # of the time left when the run starts
    results: dict[str, dict[str, Any] | str] = {}
    for name, changes in runs.items():
        if skip.get(name) or (name != "full" and not isinstance(results.get("full"), dict)):
            results[name] = skip.get(name) or "the full fine-tuning baseline did not run"
            continue
        left = deadline - time.monotonic()
        try:
            config = config_of(setting, data, name, **changes)
            results[name] = in_child(config, Path(setting.folder) / "adapters" / f"{name}-run", left * shares[name])
        except (RuntimeError, TimeoutError) as e:
            results[name] = f"{name}: {e}"
    return cells(results)


def cells(results: dict[str, dict[str, Any] | str]) -> dict[str, Cell]:
    """The LoRA and QLoRA rows from the runs' figures (a string: why a run gave none)."""
    full, lora, qlora = results["full"], results["lora"], results["qlora"]
    if not isinstance(full, dict):
        return {key: missing(str(full)) for key in ("lora_memory", "lora_time", "qlora")}
    out: dict[str, Cell] = {}
    if isinstance(lora, dict):
        figures = {"full": full, "lora": lora, "rank": RANK}
        out["lora_memory"] = Cell(
            f"{ratio(lora['peak_bytes'], full['peak_bytes'])} ({gib(lora['peak_bytes'])} / "
            f"{gib(full['peak_bytes'])}{', the process' if full['device'] == 'cpu' else ' reserved'})",
            figures,
        )
        out["lora_time"] = Cell(
            f"{ratio(lora['seconds_per_step'], full['seconds_per_step'])} ({lora['seconds_per_step']:.3f} / "
            f"{full['seconds_per_step']:.3f} s)",
            figures,
        )
    else:
        out["lora_memory"] = out["lora_time"] = missing(lora)
    if isinstance(qlora, dict):
        out["qlora"] = Cell(
            f"memory {ratio(qlora['peak_bytes'], full['peak_bytes'])} ({gib(qlora['peak_bytes'])}), time "
            f"{ratio(qlora['seconds_per_step'], full['seconds_per_step'])} ({qlora['seconds_per_step']:.3f} s)",
            {"full": full, "qlora": qlora, "rank": RANK},
        )
    else:
        out["qlora"] = missing(qlora)
    return out
