"""Training data at the paper's size: `cheems train` on CheemsPreference-sized data, start-up and peak memory.

Generates (once, `bench/paper_data.py`) 27,861 prompts x 7 responses of 350-900 Chinese characters (367 MiB) and
a tiny real-vocabulary model, then runs `cheems train --recipe tiny-cpu` (max_length 2048, three steps, no
evaluation) as a user would, each run a fresh process tree sampled every 0.2 s for its memory:

- baseline: tokenizing in memory (`token_cache=off`, the path every run took before the token cache) on the first
  `--baseline-prompts` prompts, against the token cache's cold and warm runs on the same prompts: the ratios;
- the whole file: a cold cache (built by the run), then a warm one (mapped), with 1 and with `--nproc 2` processes.

Printed per run: seconds to the first step (the trainer's own start-up record), the peak resident memory of the
largest process, and of all processes together both as RSS (the memory-mapped token file counted in each process
that reads it) and PSS (shared pages divided between their processes: what the node really holds). Goals (issue 34,
2 cores, 24 GiB): cold first step within 240 s and one process at most 4 GiB; two processes together at most 5 GiB;
a warm run's first step within 60 s.

    python bench/data_bench.py                          # the paper's size (about 8 minutes here)
    python bench/data_bench.py --prompts 3000           # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from paper_data import PREFERENCE_PROMPTS, PREFERENCE_RESPONSES
from paper_data import write as write_data

GIB = 2**30


@dataclass
class Run:
    name: str
    first_step: float  # seconds to the first step, as the trainer's start-up record says
    data: float  # of which reading/tokenizing or mapping the data
    largest_rss: int  # bytes: the peak of the largest process
    total_rss: int  # bytes: the peak of all processes together
    total_pss: int


def tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes; (0, 0) once it is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    except (OSError, ValueError):
        return 0, 0
    return int(fields["Rss"].split()[0]) * 1024, int(fields["Pss"].split()[0]) * 1024


def sampled(command: list[str], env: dict[str, str]) -> tuple[int, int, int, int]:
    """Run `command`; (exit status, the largest process's peak RSS, the tree's peak RSS, the tree's peak PSS).
    The launcher (`cheems train` waiting on torchrun) is counted too: it is part of what a run holds."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = [0, 0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sizes = [memory(pid) for pid in tree(process.pid)]
            peaks[0] = max(peaks[0], *(r for r, _ in sizes))
            peaks[1] = max(peaks[1], sum(r for r, _ in sizes))
            peaks[2] = max(peaks[2], sum(p for _, p in sizes))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, errors = process.communicate()
    done.set()
    sampler.join()
    if process.returncode:
        sys.stderr.write(errors[-3000:])
    return process.returncode, *peaks  # type: ignore[return-value]


def train(name: str, data: Path, model: Path, cache: str, nproc: int, work: Path) -> Run:
    out = work / f"run-{name.replace(' ', '-')}"
    shutil.rmtree(out, ignore_errors=True)
    settings = [f"model={model}", f"train_files={data}", "eval_files=[]", "max_length=2048", "stop_after=3"]
    settings += [f"out_dir={out}", f"token_cache={cache}", "progress=false"]
    command = [sys.executable, "-m", "cheems_cli", "train", "--recipe", "tiny-cpu", "--nproc", str(nproc)]
    command += [a for s in settings for a in ("--set", s)]
    status, largest, total, pss = sampled(command, {**os.environ, "PYTHONUNBUFFERED": "1"})
    if status:
        raise SystemExit(f"{name}: cheems train exited {status}")
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["startup"]
    run = Run(name, first["total"], first["data"], largest, total, pss)
    print(
        f"{name:<34} {run.first_step:7.1f} s {run.data:7.1f} s {largest / GIB:8.2f} GiB {total / GIB:8.2f} GiB "
        f"{pss / GIB:8.2f} GiB",
        flush=True,
    )
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=PREFERENCE_PROMPTS)
    parser.add_argument("--baseline-prompts", type=int, default=3000)
    parser.add_argument("--data-dir", type=Path, default=Path("out/bench"))
    parser.add_argument("--nproc", type=int, default=2, help="processes of the multi-process runs (0: none)")
    args = parser.parse_args(argv)
    from trainer.tiny import init_tiny_model

    full = write_data(args.data_dir / f"preference-{args.prompts}.jsonl", args.prompts, PREFERENCE_RESPONSES)
    small = write_data(args.data_dir / f"preference-{args.baseline_prompts}.jsonl", args.baseline_prompts, 7)
    with tempfile.TemporaryDirectory(prefix="data-bench-") as tmp:
        work = Path(tmp)
        model = init_tiny_model(work / "model")
        print("device: cpu (2 cores here); tiny Qwen2 RM (hidden 64, 2 layers), max_length 2048, 3 steps")
        print(f"{'run':<34} {'1st step':>9} {'data':>9} {'1 process':>12} {'all RSS':>12} {'all PSS':>12}")
        base = train(f"in memory, {args.baseline_prompts} prompts", small, model, "off", 1, work)
        cold = train(f"cache cold, {args.baseline_prompts} prompts", small, model, str(work / "c0"), 1, work)
        warm = train(f"cache warm, {args.baseline_prompts} prompts", small, model, str(work / "c0"), 1, work)
        print(f"  data time vs in memory: cold {cold.data / base.data:.2f}x, warm {warm.data / base.data:.3f}x; "
              f"peak memory: cold {cold.largest_rss / base.largest_rss:.2f}x, warm {warm.largest_rss / base.largest_rss:.2f}x")
        runs = [train(f"cache cold, {args.prompts} prompts", full, model, str(work / "c1"), 1, work)]
        runs.append(train(f"cache warm, {args.prompts} prompts", full, model, str(work / "c1"), 1, work))
        if args.nproc > 1:
            runs.append(train(f"cache cold, {args.prompts}, nproc {args.nproc}", full, model, str(work / "c2"),
                              args.nproc, work))
            runs.append(train(f"cache warm, {args.prompts}, nproc {args.nproc}", full, model, str(work / "c2"),
                              args.nproc, work))
    goals = [
        ("cold first step <= 240 s", runs[0].first_step <= 240),
        ("one process <= 4 GiB", runs[0].largest_rss <= 4 * GIB),
        ("warm first step <= 60 s", runs[1].first_step <= 60),
    ]
    if args.nproc > 1:
        goals.append((f"{args.nproc} processes together <= 5 GiB (PSS)", max(r.total_pss for r in runs[2:]) <= 5 * GIB))
    print("goals:", "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in goals))


if __name__ == "__main__":
    main()
