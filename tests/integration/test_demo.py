"""The whole flow, as `make demo` runs it (fewer epochs): every service for real, then nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_end_to_end_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {**os.environ, "OUT": str(out), "EPOCHS": "2", "BIN": str(Path(sys.executable).parent)}
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((out / "report" / "results.json").read_text())
    assert set(result["subsets"]) == {"open", "human"} and 0 <= result["overall"] <= 1
    assert (out / "report" / "per_category.png").stat().st_size > 10_000
    stats = json.loads((out / "resolve_stats.json").read_text())
    assert stats["prompts"] == 18
    assert (out / "preference.jsonl").exists() and (out / "rm" / "model" / "model.safetensors").exists()
    leftovers = subprocess.run(["pgrep", "-f", str(out / "rm" / "model")], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == "", "the scorer outlived the demo"
