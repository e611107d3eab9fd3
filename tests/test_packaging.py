"""The project installs on a fresh machine from its own files: every pin names a PyPI release."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[a-z0-9,_-]+\])?==[A-Za-z0-9.!+_-]+$")


def test_constraints_pin_releases_not_local_files() -> None:
    bad = [
        f"constraints.txt:{n}: {line}"
        for n, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), start=1)
        if line and not line.startswith("#") and not PIN.match(line)
    ]
    assert not bad, "not a name==version pin (a fresh machine cannot install it):\n" + "\n".join(bad)
