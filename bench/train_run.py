"""One `trainer.train` run in a process of its own, its figures written as JSON: a peak memory is a process's.

The GPU report's LoRA and QLoRA rows (`bench/gpu_report.py`) and the LoRA quality comparison
(`bench/lora_bench.py`) train each setting here, one child process each, so that each peak is that run's alone
(the CPU's peak resident set never comes down within a process). Written: the peak memory (CUDA: the caching
allocator's peak reserved and allocated bytes; CPU: VmHWM, the peak resident set since exec), the steady seconds a
step and sequence tokens a second (the first step, with its warm-up, left out), the last loss and the final
evaluation when the config has eval files.

    python bench/train_run.py CONFIG.json OUT.json      # CONFIG.json: TrainConfig's fields
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpu_parts.launch import last_error


def peak_rss() -> int:
    """This process's peak resident set so far, bytes: VmHWM (reset at exec, unlike ru_maxrss, which a child can
    inherit from the process that forked it), getrusage where /proc is not."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def steady(records: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds a step, sequence tokens a second) over the steps after the first (all of them when one)."""
    rest = records[1:] or records
    seconds = sum(r["seconds"] for r in rest)
    return seconds / len(rest), sum(r["tokens"] for r in rest) / seconds if seconds else 0.0


def figures(records: list[dict[str, Any]], device: str) -> dict[str, Any]:
    """What the run's metrics records and this process say about it."""
    import torch

    per_step, rate = steady(records)
    cuda = device == "cuda"
    out: dict[str, Any] = {
        "device": device,
        "steps": len(records),
        "seconds_per_step": per_step,
        "tokens_per_s": rate,
        "loss": records[-1]["loss"],
        "peak_bytes": int(torch.cuda.max_memory_reserved()) if cuda else peak_rss(),
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
        "mfu": [r["mfu"] for r in records[1:] if "mfu" in r] or None,
    }
    evaluation = next((r["eval"] for r in reversed(records) if "eval" in r), None)
    if evaluation is not None:
        out["overall"] = evaluation["overall"]
        out["subsets"] = {
            name: {"accuracy": s["accuracy"], "exact_match": s["exact_match"]}
            for name, s in evaluation["subsets"].items()
        }
    return out


def run(config_path: Path, out: Path) -> None:
    import torch

    from trainer.config import TrainConfig
    from trainer.train import train

    config = TrainConfig(**json.loads(config_path.read_text(encoding="utf-8")))
    train(config)
    metrics = Path(config.out_dir) / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out.write_text(json.dumps(figures(records, device)), encoding="utf-8")


def in_child(config: dict[str, Any], folder: Path, timeout: float) -> dict[str, Any]:
    """Train `config` (TrainConfig's fields) in a child process; its figures. RuntimeError with the child's last
    error line when it fails, TimeoutError when it runs past `timeout` seconds (it is stopped)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec, out, log = folder / "config.json", folder / "figures.json", folder / "log.txt"
    spec.write_text(json.dumps(config), encoding="utf-8")
    command = [sys.executable, str(Path(__file__).resolve()), str(spec), str(out)]
    with log.open("w", encoding="utf-8") as sink:
        try:
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"over its {timeout:.0f} s (log: {log})") from None
    if done.returncode or not out.exists():
        raise RuntimeError(f"{last_error(log)} (exit {done.returncode}, log: {log})")
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python bench/train_run.py CONFIG.json OUT.json")
    run(Path(sys.argv[1]), Path(sys.argv[2]))
