"""Peak host memory of each FSDP rank: the model built on the meta device and loaded shard by shard
(`trainer.weights.sharding.load_sharded`) against the old path (the whole model loaded in float32 on every rank, then
`fully_shard`), both measured in the same run, under torchrun with gloo on the CPU.

For each path, `--nproc` ranks load a random-weight RM of the given shape (default: hidden 1024, 8 layers, so
about 1 GB in float32, most of it the 151k-token embedding) and take one optimizer step (forward, backward,
AdamW). Each rank reports its peak resident memory (VmHWM) after start-up (torch, transformers,
the process group: the floor any path pays), after loading, and after the step. Printed: per
path and rank, and the ratio of the worst rank's peaks, new over old (also of the peaks above the floor).

    python bench/fsdp_memory_bench.py                     # 2 ranks, CPU
    python bench/fsdp_memory_bench.py --nproc 4 --hidden 2048 --layers 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from model_options import add_model_options, describe_shape, save_random_model
from train_run import peak_rss

PATHS = ("old", "new")  # old: whole model on every rank, then sharded; new: meta device, shards read per rank


def peak_mib() -> float:
    """This process's peak resident memory so far, MiB (`train_run.peak_rss`)."""
    return peak_rss() / 2**20


def worker(path: str, model: Path, report: Path) -> None:
    """One rank under torchrun: load the model by `path`, take one step, write its peaks (rank 0 gathers)."""
    from cheems.forward import forward_rewards
    from cheems.model import load_model
    from trainer.config import TrainConfig
    from trainer.distributed import gather_objects, setup, teardown
    from trainer.weights.sharding import load_sharded, shard

    world = setup()
    config = TrainConfig(model=str(model), fsdp=True, bf16=False, progress=False)
    peaks = {"floor": peak_mib()}
    if path == "old":
        base, _ = load_model(model, training=True)  # both paths load the tokenizer too
        base.to(world.device)
        shard(base, config, world)
    else:
        base, _ = load_sharded(config, world)
    peaks["loaded"] = peak_mib()
    optimizer = torch.optim.AdamW(base.parameters(), lr=1e-5)
    generator = torch.Generator().manual_seed(world.rank)
    sequences = torch.randint(0, base.config.vocab_size, (2, 128), generator=generator).tolist()
    forward_rewards(base, sequences, world.device).sum().backward()
    optimizer.step()
    peaks["stepped"] = peak_mib()
    everyone = gather_objects(peaks, world)
    if world.is_main:
        report.write_text(json.dumps(everyone), encoding="utf-8")
    teardown()


def run_path(path: str, model: Path, nproc: int, folder: Path) -> list[dict[str, float]]:
    report = folder / f"{path}.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    command += [__file__, "--worker", path, "--model", str(model), "--report", str(report)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    peaks: list[dict[str, float]] = json.loads(report.read_text(encoding="utf-8"))
    return peaks


def print_table(results: dict[str, list[dict[str, float]]]) -> None:
    print(f"{'path':<5} {'rank':>4} {'floor MiB':>10} {'loaded MiB':>11} {'stepped MiB':>12}")
    for path, ranks in results.items():
        for rank, peaks in enumerate(ranks):
            print(f"{path:<5} {rank:>4} {peaks['floor']:>10.0f} {peaks['loaded']:>11.0f} {peaks['stepped']:>12.0f}")
    for phase in ("loaded", "stepped"):
        old, new = (max(r[phase] for r in results[p]) for p in PATHS)
        above_old, above_new = (max(r[phase] - r["floor"] for r in results[p]) for p in PATHS)
        print(
            f"worst rank's peak {phase}: new / old = {new:.0f} / {old:.0f} MiB = {new / old:.2f}; "
            f"above the floor {above_new:.0f} / {above_old:.0f} MiB = {above_new / above_old:.2f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser, dtype=False)
    parser.set_defaults(hidden=1024, layers=8, heads=8, kv_heads=2)
    parser.add_argument("--nproc", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker, args.model, args.report)
        return
    from trainer.tiny import build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = save_random_model(args, build_tokenizer(), folder / "model")
        size = sum(f.stat().st_size for f in model.glob("*.safetensors")) / 2**20
        print(f"device: CPU, {os.cpu_count()} cores ({platform.processor() or platform.machine()}), gloo")
        print(f"model: {describe_shape(args)}, {size:.0f} MiB of float32 weights; {args.nproc} ranks")
        results: dict[str, Any] = {path: run_path(path, model, args.nproc, folder) for path in PATHS}
    print_table(results)


if __name__ == "__main__":
    main()
