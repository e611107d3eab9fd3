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


def test_every_static_folder_ships_in_the_package() -> None:
    """Pages load CSS and JavaScript from the package: an installed wheel (the image) must carry them."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folders = [
        p for top in ("cheems", "services", "evaluator", "trainer", "system") for p in (ROOT / top).rglob("static")
    ]
    assert folders, "no static folder found: the test looks in the wrong place"
    missing = [
        str(folder.relative_to(ROOT))
        for folder in folders
        if "static/*" not in data.get(".".join(folder.parent.relative_to(ROOT).parts), [])
    ]
    assert not missing, f"static files not in [tool.setuptools.package-data]: {missing}"
