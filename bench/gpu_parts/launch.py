"""A part of the GPU report in a process of its own, stopped at its time limit; its cells, or why there are none.

Each part runs as `python bench/gpu_report.py --part NAME --setting FILE --out FILE` (FSDP under torchrun), in a
session of its own so that a part over its limit is stopped with everything it started (torchrun's ranks, the
training runs' processes). Its output goes to `FOLDER/NAME.log`; a part that fails is reported by the last line
of that log naming an error, and the next part runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPORT = Path(__file__).resolve().parents[1] / "gpu_report.py"


@dataclass
class Outcome:
    data: dict[str, Any] | None  # what the part wrote, None when it wrote nothing
    why: str  # why not, "" when it did
    seconds: float
    log: str


def command(part: str, setting: Path, out: Path, nproc: int = 0) -> list[str]:
    """The part's command line: under torchrun with `nproc` ranks when given."""
    launcher = [sys.executable]
    if nproc:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return [*launcher, str(REPORT), "--part", part, "--setting", str(setting), "--out", str(out)]


def run_part(part: str, setting: Path, folder: Path, limit: float, nproc: int = 0) -> Outcome:
    """Run the part for at most `limit` seconds; what it wrote to its JSON file, or why it wrote nothing."""
    out, log = folder / f"{part}.json", folder / f"{part}.log"
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            command(part, setting, out, nproc),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},  # a part stopped at its limit leaves its log whole
        )
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            stop(process)
            why = f"over its {limit:.0f} s share of the time budget"
            return Outcome(None, why, time.monotonic() - started, str(log))
    seconds = time.monotonic() - started
    if code or not out.exists():
        return Outcome(None, f"{last_error(log)} (exit {code}; {log})", seconds, str(log))
    return Outcome(json.loads(out.read_text(encoding="utf-8")), "", seconds, str(log))


def stop(process: subprocess.Popen[Any]) -> None:
    """End the part's session: SIGTERM, then SIGKILL after 10 s (a rank stuck in a collective ignores the first)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def last_error(log: Path) -> str:
    """The line of the log that says what went wrong: the last naming an error, else the last line."""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line or "error:" in line]
    return (named or lines or ["no output"])[-1][:300]
