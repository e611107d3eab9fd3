"""What reporting a training costs a step: `trainer.train` with report_to=none against report_to=tensorboard (or
any `--with` list), the same tiny run in the same process, interleaved (none, with, with, none, ...) so a load
that drifts over the minutes touches both alike.

Printed: each setting's median steady seconds a step over its runs (the first step, with its warm-up, left out:
the trainer's own `seconds`, which count the reporting of the records flushed before), the ratio of steps a
second (with / without, of the medians and of each setting's fastest run: on a shared machine the load moves
the runs more than reporting does; the issue asks >= 0.99), the process's CPU seconds a run (all threads, the
writers' included: moved far less by other processes), and the reporting's own cost, timed directly:
`Tracking.log` of one step record, as a share of the fastest step without it.

    python bench/report_bench.py                                  # CPU, the tiny model, 3 rounds
    python bench/report_bench.py --with tensorboard,mlflow --rounds 5 --log-every 1
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from trainer.config import TrainConfig
from trainer.distributed import World
from trainer.tiny import init_tiny_model
from trainer.tracking.session import start_tracking
from trainer.train import train

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample" / "open.jsonl"


def cpu_seconds() -> float:
    """This process's CPU time so far, every thread's (user + system): what other processes' load moves least."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(model: Path, out: Path, args: argparse.Namespace, report_to: list[str]) -> list[dict[str, Any]]:
    """One training of the tiny model; its metrics records, the first with the run's CPU seconds (`cpu`)."""
    config = TrainConfig(
        model=str(model), train_files=[str(SAMPLE)], eval_files=[], out_dir=str(out), max_length=args.max_length,
        micro_batch_size=args.micro_batch, epochs=args.epochs, lr=1e-4, progress=False, log_every=args.log_every,
        bf16=False, report_to=report_to, tracking_uri=f"sqlite:///{out.parent / 'mlflow.db'}", seed=0,
    )  # fmt: skip
    started = cpu_seconds()
    train(config)
    spent = cpu_seconds() - started
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    records[0]["cpu"] = spent
    return records


def steady(records: list[dict[str, Any]]) -> float:
    """Seconds a step over the steps after the first."""
    rest = records[1:] or records
    return sum(r["seconds"] for r in rest) / len(rest)


def logging_cost(records: list[dict[str, Any]], report_to: list[str], root: Path, repeat: int = 200) -> float:
    """Seconds `Tracking.log` takes for one step record (the median over `repeat` records)."""
    config = TrainConfig(out_dir=str(root / "direct"), report_to=report_to, tracking_uri=f"sqlite:///{root / 'd.db'}")
    times = []
    with start_tracking(config, World(0, 1, 0, torch.device("cpu"))) as tracking:
        for n in range(repeat):
            record = {**records[n % len(records)], "step": n + 1}
            started = time.perf_counter()
            tracking.log([record])
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        model = init_tiny_model(root / "tiny", args.hidden, args.layers, seed=0)
        per_step: dict[str, list[float]] = {"none": [], "with": []}
        cpu: dict[str, list[float]] = {"none": [], "with": []}
        order = ["none", "with", "with", "none"]
        last: list[dict[str, Any]] = []
        for n in range(args.rounds):
            setting = order[n % len(order)]
            for k, label in enumerate((setting, "with" if setting == "none" else "none")):
                report_to = args.report_with if label == "with" else []
                last = run(model, root / f"run-{n}-{k}", args, report_to)
                per_step[label].append(steady(last))
                cpu[label].append(last[0]["cpu"])
        none, with_ = statistics.median(per_step["none"]), statistics.median(per_step["with"])
        direct = logging_cost(last, args.report_with, root)
    steps = len(last)
    print(f"tiny RM (hidden {args.hidden}, {args.layers} layers) on {SAMPLE.name}: {steps} steps a run, CPU, "
          f"{args.threads} thread(s), log_every {args.log_every}, {args.rounds} rounds of both")  # fmt: skip
    for label, name in (("none", "none"), ("with", ",".join(args.report_with))):
        runs = ", ".join(f"{t * 1000:.1f}" for t in per_step[label])
        print(f"  report_to={name}: {statistics.median(per_step[label]) * 1000:.1f} ms a step (runs: {runs})")
    fastest = min(per_step["none"])
    ratio = fastest / min(per_step["with"])
    print(f"  steps a second, with / without: {none / with_:.3f} (medians), {ratio:.3f} (fastest runs)")
    cpu_none, cpu_with = statistics.median(cpu["none"]), statistics.median(cpu["with"])
    print(f"  CPU seconds a run (the whole run, start-up included): {cpu_none:.2f} without, {cpu_with:.2f} with: "
          f"{cpu_none / cpu_with:.3f}")  # fmt: skip
    print(f"  Tracking.log of one step record: {direct * 1e6:.0f} us, {direct / fastest:.2%} of the fastest step")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--with", dest="report_with", type=lambda v: [x for x in v.split(",") if x],
                        default=["tensorboard"], help="report_to against none (default tensorboard)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting (default 3)")
    parser.add_argument("--epochs", type=float, default=2.0, help="epochs a run (default 2)")
    parser.add_argument("--micro-batch", type=int, default=4, help="responses a step (default 4)")
    parser.add_argument("--max-length", type=int, default=256, help="the trainer's max_length (default 256)")
    parser.add_argument("--log-every", type=int, default=1, help="steps between reads and reports (default 1)")
    parser.add_argument("--hidden", type=int, default=64, help="the tiny model's hidden size (default 64)")
    parser.add_argument("--layers", type=int, default=2, help="its layers (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
