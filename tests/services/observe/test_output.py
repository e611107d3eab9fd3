"""A JSON-mode service's output that no logger wrote (a print, a child process's lines on the inherited stderr, a
raw write to the file descriptor) comes out as JSON lines of the logger `output`, masked, none lost at exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SECRET = "sekrit-Q7vK2mN9xR4tW8yB6pL3"

PROGRAM = f"""
import json, logging, os, subprocess, sys
from services.observe.logs import setup_logging
from services.observe.output import wrap_output
wrap_output(setup_logging("scorer", log_format="json"))
wrap_output(setup_logging("scorer", log_format="json"))  # a second call wraps nothing more
print("a print")
child = "import json; print('Signal (15) received.'); print(json.dumps({{'time': 't', 'from': 'child'}}))"
subprocess.run([sys.executable, "-c", child], check=True)
logging.getLogger("services.scorer").warning("a record")
os.write(2, b"a raw write, authorization: Bearer {SECRET}\\n")
raise SystemExit("the last words")
"""


def test_every_line_of_the_process_is_json_and_nothing_is_lost_at_exit() -> None:
    run = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stdout == "", run.stderr
    records = [json.loads(line) for line in run.stderr.splitlines()]
    said = {(r.get("logger"), r.get("message")) for r in records}
    assert {
        ("output", "a print"),
        ("output", "Signal (15) received."),
        ("services.scorer", "a record"),
        ("output", "a raw write, authorization: Bearer ***"),
        ("output", "the last words"),
    } <= said, records
    assert {"time": "t", "from": "child"} in records  # a child's own JSON line, as it wrote it
    assert len(records) == 6 and SECRET not in run.stderr
    assert {r["service"] for r in records if "logger" in r} == {"scorer"}
