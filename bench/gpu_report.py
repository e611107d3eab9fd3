"""Every GPU goal still unmeasured, in one command (`make gpu-report`), within 8 minutes on one lent GPU host.

On the offline GPU host (docs/gpu-host.md: the host's torch, the wheelhouse installed) it
builds a Qwen2.5-0.5B-shaped RM with random weights in bf16 on the card, then runs each part in a process of its
own, with a share of the time budget (`--budget`, default 450 s), and prints, under the card's name and the
software's versions, one table with a row per goal: a figure, or "not measured: why" (a part that fails, or
runs out of its time, is a line; the next part runs):

  a  serving   the scorer served (gRPC, torch backend) against in-process bf16 scoring, concurrency 32 (issue 29)
  b  training  the training step's MFU, and its speed against a bare forward + backward of the same batches
  c  fsdp      the FSDP2 load and step in bf16 (one rank per GPU: 1, or 2 on a two-GPU host), and the fixed costs
               the memory plan assumes (CUDA context, NCCL buffers, fragmentation) measured
  d  adapters  LoRA r16 against full fine-tuning: peak memory, seconds a step; e: QLoRA on CUDA (bitsandbytes)

The table (Markdown, for docs/performance.md) goes to stdout and, with every raw figure, to `--json` (default
out/gpu-report.json). Without CUDA it runs the same parts on the CPU with the tiny test shape (a minute or two),
which is how it is tested; a CUDA row there says why it is not measured.

    make gpu-report                                   # = python bench/gpu_report.py
    python bench/gpu_report.py [--device cuda|cpu] [--budget 450] [--parts serving,fsdp] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpu_parts.launch import run_part
from gpu_parts.rows import PARTS, Cell, cells_from_json, cells_to_json, fill, render, to_json
from gpu_parts.setting import CPU_SHAPE, GPU_SHAPE, Setting

# each part's share of the budget, in parts of it (the whole: `--budget` less the model's build)
SHARES = {"serving": 0.2, "training": 0.22, "fsdp": 0.18, "adapters": 0.4}
FLOOR = 20.0  # seconds under which a part is not started


def child(part: str, setting_path: Path, out: Path) -> None:
    """One part, in its own process: its cells (or, for "build", the model's description) written to `out`."""
    setting = Setting.read(setting_path)
    if part == "build":
        out.write_text(json.dumps(build(setting)), encoding="utf-8")
        return
    if part == "serving":
        from gpu_parts.serving import measure as serving

        cells: dict[str, Cell] | None = serving(setting)
    elif part == "training":
        from gpu_parts.training import measure as training

        cells = training(setting)
    elif part == "fsdp":
        from gpu_parts.fsdp import measure as fsdp

        cells = fsdp(setting)
    else:
        from gpu_parts.adapters import measure as adapters

        cells = adapters(setting, setting.budget)
    if cells is not None:  # FSDP: rank 0 writes
        out.write_text(json.dumps(cells_to_json(cells)), encoding="utf-8")


def build(setting: Setting) -> dict[str, Any]:
    """The model every part loads, built on the device, and what the header says of the device and software."""
    import torch
    import transformers
    from gpu_parts.setting import build_checkpoint

    started = time.monotonic()
    _, parameters = build_checkpoint(setting.shape, setting.device, Path(setting.model))
    cuda = setting.cuda
    return {
        "card": torch.cuda.get_device_name() if cuda else f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
        "gpus": torch.cuda.device_count() if cuda else 0,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "parameters": parameters,
        "build_s": time.monotonic() - started,
    }


def header(about: dict[str, Any], setting: Setting) -> str:
    shape = setting.shape
    cuda = f", CUDA {about['cuda']}" if about.get("cuda") else ""
    return (
        f"**{about['card']}** ({about['gpus']} GPU) - torch {about['torch']}{cuda}, transformers "
        f"{about['transformers']}, Python {about['python']}\n\nmodel: Qwen2 hidden {shape['hidden']}, "
        f"{shape['layers']} layers, {shape['heads']} heads ({shape['kv_heads']} KV), intermediate "
        f"{shape['intermediate']}, {about['parameters'] / 1e6:,.1f}M parameters, random weights, built in "
        f"{about['build_s']:.0f} s"
    )


def report(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Build the model, run every part in its share of the time, print the table; the JSON it writes."""
    deadline = time.monotonic() + args.budget
    cuda = args.device == "cuda"
    setting = Setting(args.device, str(folder / "model"), str(folder), dict(GPU_SHAPE if cuda else CPU_SHAPE))
    path = setting.write(folder / "setting.json")
    built = run_part("build", path, folder, args.budget / 4)
    if built.data is None:
        raise SystemExit(f"error: the model could not be built: {built.why}")
    about = built.data
    nproc = min(2, about["gpus"]) if cuda else 1
    setting = replace(setting, nproc=max(1, nproc))
    cells: dict[str, Cell] = {}
    failures: dict[str, str] = {}
    parts: dict[str, Any] = {}
    left_share = sum(SHARES[p] for p in args.parts)
    for part in args.parts:
        left = deadline - time.monotonic()
        limit = left * SHARES[part] / left_share
        left_share -= SHARES[part]
        if limit < FLOOR:
            failures[part] = f"no time left in the {args.budget:.0f} s budget"
            continue
        replace(setting, budget=limit * 0.95).write(path)  # the part's own share, a margin for its exit
        outcome = run_part(part, path, folder, limit, setting.nproc if part == "fsdp" else 0)
        parts[part] = {"seconds": round(outcome.seconds, 1), "limit": round(limit), "why": outcome.why}
        print(f"{part}: {outcome.seconds:.0f} s" + (f", {outcome.why}" if outcome.why else ""), file=sys.stderr)
        if outcome.data is None:
            failures[part] = f"{part} part failed: {outcome.why}"
        else:
            cells |= cells_from_json(outcome.data)
    for part in PARTS:
        if part not in args.parts:
            failures[part] = f"not asked for (--parts {','.join(args.parts)})"
    table = fill(cells, failures)
    print(render(table, header(about, setting)))
    return to_json(table, {**about, "device": args.device, "shape": setting.shape, "nproc": setting.nproc}, parts)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when torch sees one, else cpu")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for the whole report (default 450)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)} (default all)")
    parser.add_argument("--json", type=Path, default=Path("out/gpu-report.json"), help="default out/gpu-report.json")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (the model, data, logs)")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--setting", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        return args
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown or not args.parts:
        parser.error(f"--parts: {', '.join(unknown) or 'none given'}: choose from {', '.join(PARTS)}")
    if not args.budget > 0:
        parser.error(f"--budget must be > 0 seconds, got {args.budget}")
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: this torch sees no CUDA device (leave --device out to run on the CPU)")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.part:
        child(args.part, args.setting, args.out)
        return
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = report(args, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="gpu-report-") as tmp:
            result = report(args, Path(tmp))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"\n(JSON: {args.json})")


if __name__ == "__main__":
    main()
