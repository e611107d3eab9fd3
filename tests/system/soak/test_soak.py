"""The chaos soak's short form, as `make test` runs it: `cheems up` on SQLite under load, a random process of any
service SIGKILLed every 20 s for 2 minutes, then `cheems up` itself SIGKILLed and started again; nothing
acknowledged may be lost or doubled, every service comes back, the restarted `cheems up` serves from its own
processes. (The 10-minute runs on SQLite and PostgreSQL, with their figures, are in the README.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow("longest")  # runs first of all: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[3]


def test_a_short_soak_loses_nothing_and_every_service_comes_back(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    command = [sys.executable, "-m", "cheems_cli", "dev", "soak", "--out", str(out), "--minutes", "2"]
    command += ["--kill-every", "20", "--annotators", "6", "--ingest-rate", "2", "--run-every", "60", "--seed", "41"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert report["ok"] and {c["name"] for c in report["checks"]} >= {
        "restart takes over", "samples", "tasks made", "sample events", "annotations", "ranking events",
        "evaluation runs",
        "outbox", "clients served", "services back", "no crash loop given up",
    }  # fmt: skip
    assert len(report["kills"]) >= 4 and all(k["recovery_s"] is not None for k in report["kills"])
    assert [k["service"] for k in report["kills"][:2]] == ["broker", "scorer"]  # the bus and the reward first
    assert report["acknowledged"]["samples"] > 100 and report["acknowledged"]["annotations"] > 100
    assert "SOAK PASSED" in run.stdout
