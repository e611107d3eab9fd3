"""`make demo`'s job through the services (one training of one epoch: the sample is tiny, and the first model
evaluated is promoted whatever it learned): every process real, the loop running by itself from annotations to an
evaluated model, the scorer switching, and nothing left running; every service checked its callers' accounts, each
process had its token in a 0600 file, and no token reached a log."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cheems.processes.ports import free_block
from cheems_cli.main import app
from system.demo import annotatable

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "open.jsonl"


def test_the_demo_runs_the_loop_through_the_services_and_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "cheems_cli", "demo", "--out", str(out), "--trainings", "1", "--epochs", "1"]
    command += ["--ports-from", str(free_block())]
    env = {**os.environ, "CHEEMS_LOG_FORMAT": "json"}  # every process of `cheems up` logs JSON lines
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False, env=env)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    lines = run.stdout.splitlines()
    stamps = [float(m.group(1)) if (m := re.match(r"\[\s*([\d.]+)s\]", line)) else None for line in lines]
    # the timeline, stamped when each event was produced: each stage's service did its part, in order
    firsts: dict[str, float] = {}
    for stage, needle in [("sample", "ingestion    sample "), ("ranking", "annotation   ranking of"),
                          ("dataset", "training     dataset "), ("model", "registered from dataset"),
                          ("evaluated", "CheemsBench overall"), ("promoted", "promoted: evaluated -> production"),
                          ("switch", "scorer       now serves rm-")]:  # fmt: skip
        firsts[stage] = next(t for t, line in zip(stamps, lines, strict=True) if t is not None and needle in line)
    assert list(firsts) == sorted(firsts, key=firsts.__getitem__), firsts
    status = CliRunner().invoke(app, ["status", "--db", f"sqlite:///{out / 'cheems.db'}", "--json", "--timeout", "0.5"])
    assert status.exit_code == 0, (status.output[-3000:], status.exception)
    report = json.loads(status.stdout)
    assert report["samples"] == 18 and report["annotations"] > 0 and report["rankings"] == annotatable(SAMPLE)
    assert sum(report["rule_filtered"].values()) > 0  # the sample's garbled responses were never annotated
    assert len(report["datasets"]) >= 1 and len(report["models"]) == 1
    [done] = [r for r in report["eval_runs"] if r["state"] == "done"]
    assert done["model_id"] == report["models"][0]["id"] and 0 <= done["overall"] <= 1
    assert set(report["services"].values()) == {"UNREACHABLE"}  # everything stopped
    leftovers = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == "", f"processes outlived the demo: {leftovers.stdout}"
    files = sorted((out / "accounts").rglob("*.token"))
    names = {f.stem for f in files}
    assert {"operator", "eval-worker", "judge"} | {f"sim-annotator-{n}" for n in range(1, 6)} == names  # judge: its
    # service account, the only credential the AI judge holds (no database URL, no Kafka user)
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    tokens = [f.read_text().strip() for f in files]
    logs = "".join(p.read_text(errors="replace") for p in (out / "logs").glob("*.log")) + run.stdout + run.stderr
    assert not [t for t in tokens if t in logs]
    records = json_logs(out / "logs")
    assert {"broker", "ingestion", "annotation", "judge", "training", "scorer", "eval-worker", "eval-sink",
            "evaluation"} <= {r["service"] for r in records}  # fmt: skip
    assert any(r["service"] == "eval-sink" and r.get("run_id") == done["id"] for r in records)
    assert any(r["service"] == "training" and r.get("training_id") for r in records)
    with sqlite3.connect(out / "cheems.db") as db:
        people = {name for (name,) in db.execute("SELECT DISTINCT annotator FROM annotations WHERE kind = 'human'")}
        requested = {who for (who,) in db.execute("SELECT requested_by FROM trainings")}
    assert people and people <= {f"sim-annotator-{n}" for n in range(1, 6)}  # each the account that sent it
    assert requested == {"policy:auto"}


def json_logs(folder: Path) -> list[dict]:
    """Every line of every process's log one JSON object with time, level, logger and service; the records.
    (annotators.log is the simulated people's command: its one line is its result, JSON of its own.)"""
    records = []
    for path in sorted(folder.glob("*.log")):
        if path.name == "annotators.log":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise AssertionError(f"{path.name}:{number} is not JSON: {line[:300]}") from None
            missing = {"time", "level", "logger", "message", "service"} - set(record)
            assert not missing, f"{path.name}:{number} lacks {missing}: {line[:300]}"
            records.append(record)
    return records
